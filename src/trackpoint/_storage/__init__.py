"""Where a checkpoint's bytes live: local files, or objects behind an fsspec URL (``s3://``, ``gs://``, ...).

Everything below the records of the format: the :class:`~trackpoint._storage.storage.Storage`
protocol and its two implementations (:mod:`.local_storage`: temp + fsync + rename, the index
last, with :mod:`.previous` keeping an overwritten version readable, :mod:`.temps` naming and
clearing temporaries, :mod:`.atomic` and :mod:`.writeback` for durable files; and
:mod:`.object_storage`: final names, the index put only if absent, with :mod:`.object_bundles`
clearing what killed writers left), :mod:`.files` (one door for every read),
:mod:`.local_files` (opening untrusted local paths), :mod:`.shard_files` (a reader's open data
files), :mod:`.naming` (a bundle's file names), :mod:`.readahead` (page-cache hints) and
:mod:`.pending_writes` (this process's saves still in flight). The object store itself is
reached through fsspec in :mod:`.fsspec_io` (reads, listing), :mod:`.ranged` (ranged reads, with
whole downloads from S3 run by :mod:`.download_process`) and :mod:`.commit` (conditional writes),
with what differs between stores in :mod:`.providers`; fsspec and its backends are optional and
imported only when a URL is used. :mod:`.child_processes` starts our helper processes (the
download process, and the writer process of async saves).

The format layer asks :func:`trackpoint._storage.storage.storage_for` which storage holds a
path and goes through that object for every read, publication and state-file swap. Nothing
here imports the format, the object model or the graph.
"""

from __future__ import annotations

import os

__all__ = ["is_url"]


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an object behind an fsspec URL rather than a local file.

    ``file://`` URLs and plain paths are local.

    Examples:
        >>> is_url("s3://bucket/run/ckpt-1"), is_url("run/ckpt-1"), is_url("file:///tmp/ckpt-1")
        (True, False, False)
    """
    text = os.fspath(path)
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme.lower() not in ("file", "local")
