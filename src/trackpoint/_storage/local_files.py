"""Opening a checkpoint's local files for reading, trusting nothing about what is at their paths.

Every ``.index``, ``.data-*`` and ``checkpoint`` file a reader opens goes through
:func:`open_regular`. A path may hold anything: a FIFO (whose ``open`` blocks until a writer
appears, and whose reads never end), a device such as ``/dev/zero`` (endless bytes and a
size of 0), a socket, a directory, or a file this user may not read. Each is refused at once
with a :mod:`trackpoint.errors` exception naming the file.

The file is opened first and checked through its descriptor, never checked by path and then
opened: a path checked and then opened can be swapped in between. ``O_NONBLOCK`` is what
keeps the open of a FIFO from blocking; it is cleared again once the file is known to be
regular (where it means nothing on local file systems, but some network and FUSE ones honour
it). Symlinks are followed, since one to a regular file is a legitimate checkpoint layout.

These are the local implementations of :class:`trackpoint._storage.storage.Storage`'s reads
(see :mod:`.local_storage`); code that may be handed a URL reads through :mod:`.files`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError, PermissionDeniedError

__all__ = ["open_regular", "read_regular"]

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _not_regular(path: str, what: str, kind: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{path} is not a regular file but {kind}; a {what} must be a regular file (or a symlink to one)"
    )


def open_regular(path: str, what: str) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading if it is a regular file, without ever blocking.

    Args:
        path: The file to open.
        what: What the file is, for messages: ``"checkpoint index"``, ``"data shard"``...

    Returns:
        ``(fd, stat)``: a blocking, close-on-exec descriptor the caller must close, and the
        file's ``fstat``.

    Raises:
        NotFoundError: Nothing is at ``path`` (or a parent is not a directory).
        PermissionDeniedError: The file may not be read.
        InvalidArgumentError: ``path`` is not a regular file (a FIFO, device, socket,
            directory, or a symlink to one), or is no valid path.
        DataLossError: The file exists but cannot be opened for another reason.

    Examples:
        >>> import os, tempfile
        >>> directory = tempfile.mkdtemp()
        >>> path = os.path.join(directory, "ckpt.index")
        >>> open(path, "wb").close()
        >>> fd, info = open_regular(path, "checkpoint index")
        >>> os.close(fd); info.st_size
        0
        >>> open_regular(directory, "checkpoint index")
        Traceback (most recent call last):
        ...
        trackpoint.errors.InvalidArgumentError: ... is not a regular file but a directory; ...
    """
    try:
        fd = os.open(path, _FLAGS)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise NotFoundError(f"{path}: no such {what}", path=path) from exc
    except PermissionError as exc:
        raise PermissionDeniedError(f"{path}: permission denied opening the {what} for reading", path=path) from exc
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # what opening a socket says
            raise _not_regular(path, what, "a socket or a device that cannot be opened") from exc
        if exc.errno in (errno.ELOOP, errno.ENAMETOOLONG):
            raise InvalidArgumentError(f"{path} is not a valid path for a {what}: {exc.strerror}") from exc
        raise DataLossError(f"{path}: cannot open the {what}: {exc.strerror}", path=path) from exc
    except (TypeError, ValueError) as exc:  # not a path, or a NUL byte in it
        raise InvalidArgumentError(f"{path!r} is not a valid path for a {what}: {exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, what, _kind(info.st_mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, 0)  # clears O_NONBLOCK; the access mode is not a status flag
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_regular(path: str, what: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (see :func:`open_regular`), at most ``limit`` of them.

    Reads no more than the size ``fstat`` gave when opened, so a file growing meanwhile
    cannot make the read unbounded; one shrinking gives fewer bytes, which the parser of
    the contents reports as truncation.

    Raises:
        InvalidArgumentError: The file holds more than ``limit`` bytes; and as :func:`open_regular`.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "checkpoint")
        >>> with open(path, "w") as f:
        ...     _ = f.write("model_checkpoint_path: 'ckpt-1'")
        >>> read_regular(path, "checkpoint state file", 1 << 20)[0]
        b"model_checkpoint_path: 'ckpt-1'"
    """
    fd, info = open_regular(path, what)
    try:
        size = info.st_size
        if size > limit:
            raise InvalidArgumentError(f"{path}: {what} of {size} bytes is larger than the {limit} bytes it may hold")
        chunks = []
        while size > 0:
            chunk = os.read(fd, size)
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk)
    except OSError as exc:
        raise DataLossError(f"{path}: cannot read the {what}: {exc.strerror}", path=path) from exc
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks), info


def write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (``pwrite`` may write less than asked).

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     write_at(f.fileno(), b"xyz", 2)
        ...     os.pread(f.fileno(), 5, 0)
        b'\\x00\\x00xyz'
    """
    view, done = memoryview(data), 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
