"""``tf.io.gfile`` for the stand-in: the five calls checkpoint scripts use, on local paths and URLs.

Local paths go to the operating system. URLs (``gs://``, ``s3://``, ...) go to fsspec, imported on
first use (``trackpoint[s3]`` or ``[gcs]`` installs it), with the storage options
``tp.set_storage_options`` set for them, as trackpoint's readers use them.
"""

from __future__ import annotations

import glob as _glob
import os
from typing import IO, Any

from trackpoint._io import filesystem, storage_for

__all__ = ["GFile", "exists", "glob", "isdir", "listdir"]


def _remote(path: str) -> bool:
    """Whether ``path`` is in an object store (its storage has no directories): fsspec serves it."""
    return not storage_for(path).has_directories


def exists(path: str) -> bool:
    """Whether a file or directory is at ``path``."""
    path = os.fspath(path)
    if _remote(path):
        fs, inner = filesystem(path)
        return bool(fs.exists(inner))
    return os.path.exists(path)


def isdir(path: str) -> bool:
    """Whether ``path`` is a directory (for a URL: a prefix other objects are under)."""
    path = os.fspath(path)
    if _remote(path):
        fs, inner = filesystem(path)
        return bool(fs.isdir(inner))
    return os.path.isdir(path)


def listdir(path: str) -> list[str]:
    """The names in the directory ``path``, as ``tf.io.gfile.listdir`` gives them (no order promised).

    Raises:
        NotFoundError: ``path`` is not a directory (TensorFlow raises this too).
    """
    from trackpoint.errors import NotFoundError

    path = os.fspath(path)
    if _remote(path):
        fs, inner = filesystem(path)
        if not fs.isdir(inner):
            raise NotFoundError(f"{path}: could not find directory", path=path)
        return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(inner, detail=False)]
    if not os.path.isdir(path):
        raise NotFoundError(f"{path}: could not find directory", path=path)
    return os.listdir(path)


def glob(pattern: str) -> list[str]:
    """The paths that match ``pattern`` (``*``, ``?`` and ``[...]``), as ``tf.io.gfile.glob``."""
    pattern = os.fspath(pattern)
    if _remote(pattern):
        fs, inner = filesystem(pattern)
        return [fs.unstrip_protocol(match) for match in fs.glob(inner)]
    return _glob.glob(pattern)


def GFile(name: str, mode: str = "r") -> IO[Any]:
    """The file ``name`` opened in ``mode`` (``"r"``/``"w"`` text, ``"rb"``/``"wb"`` bytes), as a
    context manager and file object.

    Raises:
        NotFoundError: There is no file to read at ``name``.
    """
    from trackpoint.errors import NotFoundError

    name = os.fspath(name)
    try:
        if _remote(name):
            fs, inner = filesystem(name)
            return fs.open(inner, mode)
        return open(name, mode)  # the caller closes it, as with TensorFlow's
    except FileNotFoundError as exc:
        raise NotFoundError(f"{name}: no such file", path=name) from exc
