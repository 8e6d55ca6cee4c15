"""Writing a new checkpoint for the tools: :func:`new_bundle` (all or nothing, the directories it
made removed on failure), and :func:`write_items`, which copies ``rewrite``'s planned tensors one at a time.

A large source tensor stored whole is copied a bounded chunk at a time, cast if its rule says
so (see :mod:`._chunk_copy`); a small or sliced one is read into one reused buffer, cast, and
appended. The new bundle is published only once every tensor is written; on any error (a
checksum found wrong at a tensor's end too) nothing is published and the temporary files go.

Examples:
    >>> import numpy as np, os, tempfile
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> d = tempfile.mkdtemp()
    >>> src = tp.save_tensors(os.path.join(d, "a"), {"w": np.ones(2)})
    >>> with BundleReader(src) as bundle:
    ...     write_items(bundle, os.path.join(d, "b"), [Item("v", "w")], None)
    >>> tp.list_variables(os.path.join(d, "b"))
    [('v', [2])]
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackpoint._io import OBJECT_GRAPH_KEY, BundleReader, BundleWriter, DType, Entry, dtype_of
from trackpoint._pipeline import write_remedy
from trackpoint.errors import CheckpointError, InvalidArgumentError, WriteError
from trackpoint.tools import _casting, _chunk_copy

__all__ = [
    "Item",
    "check_parents",
    "check_prefix",
    "missing_directories",
    "new_bundle",
    "remove_directories",
    "write_failed",
    "write_items",
]


@dataclass(frozen=True)
class Item:
    """One tensor of the result: its key, where its value comes from, and any cast."""

    key: str
    source: str | None  # the source key, or None for an added value
    value: Any = None
    cast: DType | None = None
    shard_id: int = 0


def write_items(bundle: BundleReader, dst: str, items: list[Item], graph_bytes: bytes | None) -> None:
    """Copy the planned tensors one at a time; publish ``dst`` only when all are written."""
    # The graph stays on its shard (TF puts it with the CPU's tensors). Shards the result still
    # uses are renumbered densely: every data file keeps at least one tensor.
    graph_shard = bundle.entry(OBJECT_GRAPH_KEY).shard_id if OBJECT_GRAPH_KEY in bundle else 0
    used = sorted({item.shard_id for item in items} | {graph_shard})
    shard = {old: new for new, old in enumerate(used)}
    buffer = _ReadBuffer(bundle)
    scratch = _chunk_copy.Scratch()
    entries = [bundle.entry(item.source) if item.source is not None else None for item in items]
    with new_bundle(dst, len(used), "rewrite") as writer:
        for item, entry, following in zip(items, entries, [*entries[1:], None]):
            if following is not None:
                bundle.prefetch(following)  # read from the disk while this one is written
            if _streamed(bundle, writer, scratch, item, entry, shard[item.shard_id]):
                continue
            value = buffer.read(entry) if entry is not None else item.value
            if item.cast is not None:
                value = _casting.cast_value(value, item.cast, item.key, bundle.prefix)
            # add_many checksums a large tensor while it writes it; the buffer is free again after.
            writer.add_many([(item.key, value)], shard[item.shard_id])
            del value
        if graph_bytes is not None:
            writer.add(OBJECT_GRAPH_KEY, graph_bytes, shard[graph_shard])


def _streamed(
    bundle: BundleReader,
    writer: BundleWriter,
    scratch: _chunk_copy.Scratch,
    item: Item,
    entry: Entry | None,
    shard: int,
) -> bool:
    """Copy ``item`` chunk by chunk (see :mod:`._chunk_copy`) if it is large and numeric; whether it was."""
    if entry is None:
        value = item.value
        if item.cast is None or not isinstance(value, np.ndarray) or value.nbytes < _chunk_copy.STREAM_BYTES:
            return False  # an added value is in memory already: only a large cast of it would copy it whole
        if dtype_of(value, item.key).is_string:
            return False
        chunks = scratch.given(value, item.cast, item.key, bundle.prefix)
        writer.add_chunks(item.key, item.cast, value.shape, chunks, shard)
        return True
    dtype = bundle.checked(entry)
    if not _chunk_copy.streams(entry, dtype):
        return False
    chunks = scratch.stored(bundle, entry, dtype, item.cast, item.key)
    writer.add_chunks(item.key, item.cast or dtype, entry.shape, chunks, shard)
    return True


class _ReadBuffer:
    """Reads small and sliced numeric tensors into one reused buffer, so that copying a checkpoint
    does not fault in fresh pages for every tensor; a value is valid until the next read. (Larger
    tensors stored whole are streamed instead, and never come here.)"""

    def __init__(self, bundle: BundleReader) -> None:
        self.bundle = bundle
        self.memory = bytearray()

    def read(self, entry: Entry) -> Any:
        dtype = self.bundle.checked(entry)
        count = math.prod(entry.shape)
        if dtype.is_string or not count:
            return self.bundle.read_checked(entry, dtype)
        size = count * dtype.itemsize
        if len(self.memory) < size:
            self.memory = bytearray()  # the old one goes first: memory holds one tensor, not two
            self.memory = bytearray(size)
        out = np.frombuffer(self.memory, dtype=dtype.numpy, count=count).reshape(entry.shape)
        return self.bundle.read_checked(entry, dtype, out)


def check_prefix(dst: str, what: str) -> None:
    """Refuse a destination prefix that is a directory: its files would go *beside* it
    (``<dir>.index``), which is never what was meant.

    Raises:
        InvalidArgumentError: ``dst`` is an existing directory or ends with a path separator.
    """
    if os.path.isdir(dst) or dst.endswith(os.sep) or (os.altsep is not None and dst.endswith(os.altsep)):
        raise InvalidArgumentError(
            f"{what}: {dst!r} is a directory; give the checkpoint a prefix inside it, such as "
            f"{os.path.join(dst, 'ckpt')!r}",
            path=dst,
        )


def write_failed(dst: str, what: str, exc: OSError) -> WriteError:
    """The :class:`WriteError` for an ``OSError`` writing ``dst``, naming the path and the remedy."""
    blocker = _file_ancestor(dst)
    if blocker is not None:
        remedy = f"{blocker} is a file, not a directory: remove or rename it, or write to another prefix."
    else:
        remedy = write_remedy(exc)
    return WriteError(f"{what}: could not write {dst}: {exc}. Nothing was published. {remedy}", path=dst)


@contextlib.contextmanager
def new_bundle(dst: str, num_shards: int = 1, what: str = "write") -> Iterator[BundleWriter]:
    """A bundle writer for ``dst``, published when the block ends; on any error nothing is
    published, and the directories made for ``dst`` are removed again (each only if empty).

    Raises:
        InvalidArgumentError: ``dst`` is a directory (see :func:`check_prefix`).
        WriteError: ``dst`` cannot be written (a parent is a file, no permission, disk full).
    """
    check_prefix(dst, what)
    made = missing_directories(os.path.dirname(os.path.abspath(dst)))
    writer = None
    try:
        writer = BundleWriter(dst, num_shards)
        yield writer
        writer.finish()
    except BaseException as exc:
        if writer is not None:
            writer.abort()
        remove_directories(made)
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointError):
            raise write_failed(dst, what, exc) from exc
        raise


def check_parents(path: str, dst: str) -> None:
    """Raise :class:`WriteError` naming the nearest existing ancestor of ``path`` that is a file, not
    a directory: creating the directories there would fail with a raw OSError naming nothing useful."""
    blocker = _file_ancestor(path)
    if blocker is not None:
        raise WriteError(
            f"cannot write {dst}: {blocker} is not a directory (a file is in the way); remove or rename it, "
            "or choose another destination",
            path=dst,
        )


def remove_directories(made: list[str]) -> None:
    """Remove the directories a failed write created (deepest first), each only if still empty."""
    for directory in made:  # none held anything before
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _file_ancestor(path: str) -> str | None:
    """The nearest existing ancestor of ``path`` that is not a directory, if any."""
    directory = os.path.dirname(os.path.abspath(path))
    while directory:
        if os.path.lexists(directory):
            return None if os.path.isdir(directory) else directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent
    return None


def missing_directories(directory: str) -> list[str]:
    """The directories the writer will create for ``directory``, deepest first."""
    missing = []
    while directory and not os.path.lexists(directory):  # a file in the way is not ours to remove
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return missing
