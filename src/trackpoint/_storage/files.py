"""Reading a checkpoint's files wherever they live: one door for every reader.

Each function asks :func:`trackpoint._storage.storage.storage_for` which storage holds the path
and reads through it: a local file through :mod:`.local_files` (which refuses FIFOs, devices
and directories without blocking), an object behind an fsspec URL through
:mod:`trackpoint._storage.fsspec_io`. Either way the caller gets a descriptor of the bytes, a
``stat`` that tells one version of the file from another, and :mod:`trackpoint.errors`
exceptions naming the file.
"""

from __future__ import annotations

import os

from trackpoint._storage import naming, storage

__all__ = ["exists", "list_names", "listing", "open_regular", "read_regular", "stat_path"]

_MAX_LISTED = 10  # checkpoints a not-found message names


def open_regular(path: str, what: str) -> tuple[int, os.stat_result]:
    """A descriptor of the file at ``path`` (``what`` names it in messages) and its stat; the
    caller closes it (see :func:`trackpoint._storage.local_files.open_regular`).

    Raises:
        NotFoundError: Nothing is at ``path``.
        PermissionDeniedError: The file may not be read.
        InvalidArgumentError: ``path`` is not a regular file, or no valid path.
        DataLossError: The file exists but cannot be opened.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.index")
        >>> open(path, "wb").close()
        >>> fd, info = open_regular(path, "checkpoint index")
        >>> os.close(fd); info.st_size
        0
    """
    return storage.storage_for(path).open(path, what)


def read_regular(path: str, what: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the file at ``path``, at most ``limit`` of them, and its stat (see
    :func:`trackpoint._storage.local_files.read_regular`).

    Raises:
        InvalidArgumentError: The file holds more than ``limit`` bytes; and as :func:`open_regular`.
    """
    return storage.storage_for(path).read(path, what, limit)


def stat_path(path: str) -> os.stat_result:
    """``os.stat`` of a local path, or the size and version of the object at a URL.

    Raises:
        OSError: Nothing is there (``NotFoundError`` for a URL, a subclass).
    """
    return storage.storage_for(path).stat(path)


def list_names(directory: str) -> list[str]:
    """The names of the files directly in the local ``directory``, or of the objects under the URL.

    Raises:
        OSError: A local directory cannot be listed (``DataLossError`` for a URL).
    """
    return storage.storage_for(directory).list_names(directory)


def exists(path: str) -> bool:
    """Whether a file is at the local ``path``, or an object at the URL."""
    return storage.storage_for(path).exists(path)


def listing(directory: str) -> str:
    """The end of a not-found message: the checkpoints that do exist in ``directory``."""
    shown = os.path.join(directory or ".", "")
    try:
        prefixes = naming.checkpoint_prefixes(list_names(shown))
    except OSError as exc:
        return f"; cannot list {shown}: {exc.strerror or exc}"
    if not prefixes:
        return f"; {shown} holds no checkpoint (no *.index file)"
    more = f", ... ({len(prefixes)} in all)" if len(prefixes) > _MAX_LISTED else ""
    return (
        f"; checkpoints in {shown}: {', '.join(prefixes[:_MAX_LISTED])}{more} "
        f"(pass one as {os.path.join(directory, prefixes[-1])})"
    )
