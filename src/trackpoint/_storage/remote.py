"""Objects behind an fsspec URL: read as a reader reads local files; a bundle committed without renames.

Why a local spool: every read path of the format layer (runs, large tensors in parallel,
in-place restores with their two passes) works on a file descriptor with ``pread``. A data
object is therefore downloaded once by the backend (streamed, in concurrent parts where the
backend has them) into a temporary file that is unlinked as soon as it is open, and every
checksum is then verified on the local bytes as for any checkpoint. Memory stays bounded by
the backend's parts; the disk holds the object while the reader has it open. The temporary
file lives in ``tempfile.gettempdir()`` (``TMPDIR``).

A remote object's identity (what tells one version from another at the same URL) is its size
and its ETag (or generation, or modification time): :func:`stat_object` returns it in the
fields of an ``os.stat_result`` that :mod:`~trackpoint._format.shard_files` compares, so a
checkpoint replaced while it is read raises as a local one does.

Writing: a bundle is written locally first (its temporary names are in the temporary
directory, see :func:`trackpoint._format.temps.temp_path`), then :func:`commit` uploads each
data file under its final name and the index last, every object only if absent: the index
is the commit. Data objects left without an index by a killed writer are not read by
anyone; a later save to the same prefix is refused while they are there.

Credentials and endpoints come from fsspec's configuration (for example the environment
variables ``FSSPEC_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``), as for any fsspec user.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import tempfile
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from trackpoint.errors import (
    CheckpointError,
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    WriteError,
)

__all__ = [
    "check_absent",
    "commit",
    "exists",
    "open_object",
    "read_object",
    "stat_object",
]

_T = TypeVar("_T")
_log = logging.getLogger("trackpoint")


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec  # an optional dependency: imported only when a URL is read
    except ImportError as exc:
        raise InvalidArgumentError(
            f"{url}: reading a URL needs fsspec and the backend of its scheme: pip install 'trackpoint[s3]' (or [gcs])"
        ) from exc
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise InvalidArgumentError(f"{url}: no fsspec backend for this URL ({exc}); install it, e.g. s3fs") from exc


def _call(url: str, what: str, action: Callable[[], _T]) -> _T:
    """Run one request, translating the backend's errors into trackpoint's."""
    try:
        return action()
    except CheckpointError:
        raise
    except FileNotFoundError as exc:
        raise NotFoundError(f"{url}: no such {what}", path=url) from exc
    except PermissionError as exc:
        raise PermissionDeniedError(f"{url}: permission denied reading the {what}", path=url) from exc
    except Exception as exc:
        raise DataLossError(f"{url}: cannot read the {what}: {exc}", path=url) from exc


def stat_object(url: str, what: str = "object") -> os.stat_result:
    """The object's size and version as an ``os.stat_result`` (see the module docstring).

    Raises:
        NotFoundError: No object is at ``url``.
        InvalidArgumentError: ``url`` names a directory (a common prefix), not an object.
    """
    fs, path = _filesystem(url)
    info = _call(url, what, lambda: fs.info(path))
    if info.get("type") != "file":
        raise InvalidArgumentError(f"{url} is not an object but a directory; a {what} must be an object")
    size = int(info.get("size") or 0)
    version = str(info.get("ETag") or info.get("etag") or info.get("generation") or info.get("mtime") or "")
    tag = zlib.crc32(version.encode()) if version else 0
    # mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime: the version stands in for the inode.
    return os.stat_result((stat.S_IFREG | 0o444, tag, 0, 1, 0, 0, size, 0, 0, 0))


def exists(url: str) -> bool:
    """Whether an object is at ``url``."""
    fs, path = _filesystem(url)
    return bool(_call(url, "object", lambda: fs.isfile(path)))


def read_object(url: str, what: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the object at ``url``, refused if larger than ``limit``, and its :func:`stat_object`."""
    info = stat_object(url, what)
    if info.st_size > limit:
        raise InvalidArgumentError(
            f"{url}: {what} of {info.st_size} bytes is larger than the {limit} bytes it may hold"
        )
    fs, path = _filesystem(url)
    data = _call(url, what, lambda: fs.cat_file(path, start=0, end=info.st_size)) if info.st_size else b""
    return bytes(data), info


def open_object(url: str, what: str) -> tuple[int, os.stat_result]:
    """A descriptor of a local, unlinked copy of the object at ``url``, and its :func:`stat_object`.

    The copy is downloaded whole (see the module docstring); the caller closes the
    descriptor, which frees the copy.

    Raises:
        NotFoundError: No object is at ``url``.
        DataLossError: A request failed, or the object changed size while it was fetched.
    """
    info = stat_object(url, what)
    fs, path = _filesystem(url)
    handle, name = tempfile.mkstemp(prefix="trackpoint-spool-")
    os.close(handle)  # the backend opens the name itself
    try:
        # The backend's own download: streamed (no whole-object buffer), in concurrent ranged
        # parts where it has them (s3fs), with its retries. One GET per part matters on servers
        # that read a whole object for every ranged GET (moto).
        _call(url, what, functools.partial(fs.get_file, path, name))
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.unlink(name)  # nothing to clean up once the descriptor is closed, whatever happens then
    size = os.fstat(fd).st_size
    if size != info.st_size:
        os.close(fd)
        raise DataLossError(
            f"{url}: the {what} changed while it was read ({size} bytes fetched, {info.st_size} listed); read it again",
            path=url,
        )
    return fd, info


def _write_call(url: str, action: Callable[[], _T]) -> _T:
    """Run one write request; a precondition failure (the object exists) is FileExistsError."""
    try:
        return action()
    except FileExistsError:
        raise
    except PermissionError as exc:
        raise WriteError(f"{url}: permission denied writing the object", path=url) from exc
    except Exception as exc:
        raise WriteError(f"{url}: could not write the object: {exc}", path=url) from exc


def commit(data_files: Sequence[tuple[str, str]], index_local: str, index_url: str) -> None:
    """Publish a bundle written locally to the object store, without renames.

    Each data file is uploaded under its final name, only if no object is there yet (S3
    ``If-None-Match: *``; a multipart upload is completed with the same condition, or
    aborted). Then the index, on the same condition: that write is the commit. Another
    writer of the prefix, or one resumed after it was thought dead, finds an object in
    place and publishes nothing; the data objects this call created are deleted again.

    Raises:
        WriteError: Nothing was committed; the message says why.
    """
    created: list[str] = []
    fs, _ = _filesystem(index_url)
    try:
        for local, final in [*data_files, (index_local, index_url)]:
            _, path = _filesystem(final)
            try:
                _write_call(final, functools.partial(fs.put_file, local, path, mode="create"))
            except FileExistsError as exc:
                raise WriteError(
                    f"{final} exists already, so checkpoint {index_url[: -len('.index')]} was not committed: another "
                    "writer is saving to (or has saved) this prefix, and objects of an object store are never "
                    "overwritten by a save; save to a new prefix",
                    path=final,
                ) from exc
            created.append(path)
    except BaseException:
        for path in reversed(created):
            try:
                fs.rm_file(path)
            except Exception as exc:  # noqa: BLE001 - left uncommitted: no reader looks at it
                _log.warning("%s: could not delete the uncommitted object %s: %s", index_url, path, exc)
        raise
    finally:
        fs.invalidate_cache()


def check_absent(url: str, what: str) -> None:
    """Raise WriteError if an object is at ``url`` (a save to a committed prefix, refused early).

    Raises:
        WriteError: An object is there.
    """
    if exists(url):
        raise WriteError(
            f"{url} exists: the {what} is committed, and a save never overwrites an object; save to a new prefix "
            "or delete the checkpoint first",
            path=url,
        )
