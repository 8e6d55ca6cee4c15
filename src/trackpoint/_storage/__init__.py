"""Where a checkpoint's bytes live: local files, or objects behind an fsspec URL (``s3://``, ``gs://``, ...).

The format layer asks :func:`trackpoint._format.storage.storage_for` which storage holds a
path and goes through that object for every read, publication and state-file swap; its
object-store implementation (:mod:`trackpoint._format.object_storage`) sends URLs here.
fsspec and its backends are optional: they are imported only when a URL is used (see
:mod:`.remote`).
"""

from __future__ import annotations

import os

__all__ = ["is_url"]


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an object behind an fsspec URL rather than a local file.

    ``file://`` URLs and plain paths are local.

    Example:
        >>> is_url("s3://bucket/run/ckpt-1"), is_url("run/ckpt-1"), is_url("file:///tmp/ckpt-1")
        (True, False, False)
    """
    text = os.fspath(path)
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme.lower() not in ("file", "local")
