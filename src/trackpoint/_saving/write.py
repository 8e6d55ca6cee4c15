"""Write a serialized checkpoint's tensors as a bundle, sharded by a callback if one is given.

Shards are written in parallel by a bounded pool of threads (checksums and file writes
release the GIL); the index, merged from all shards, is written last.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from trackpoint._format import slices
from trackpoint._format.bundle_writer import BundleWriter, ShardWriter
from trackpoint._format.index_write import merge_shards, write_index
from trackpoint._format.threads import parallel_map
from trackpoint._graph import kept_values
from trackpoint._saving.incremental import Previous, write_incremental
from trackpoint._saving.incremental_objects import PreviousObjects, write_incremental_objects
from trackpoint._saving.sharding_policies import (
    LOCAL_DEVICE,
    Shard,
    ShardableTensor,
    ShardByTaskPolicy,
    ShardingCallback,
    validate_shards,
)
from trackpoint._storage import naming, server_copy
from trackpoint._storage.storage import storage_for
from trackpoint.errors import CheckpointError, WriteError

__all__ = [
    "MAX_WRITER_THREADS",
    "shardable_tensors",
    "write_bundle",
    "write_incremental_bundle",
    "write_remedy",
    "write_shard",
]

# A process saving alone must hold every block of a tensor saved in blocks (a ShardedVariable's),
# or the checkpoint could not be read.
_ALONE = (
    "A process holding one block must save together with the others (CheckpointOptions(coordinator=...), or an "
    "initialized torch.distributed group or jax.distributed job)"
)

MAX_WRITER_THREADS = 4


def shardable_tensors(key: str, value: Any, trackable: Any) -> list[ShardableTensor]:
    """One tensor of a save as a sharding callback is offered it: whole, or each slice it holds
    (with its spec; a :class:`~trackpoint._format.slices.SliceSet` may hold several)."""
    held = slices.held_slices(value)
    if held is not None:
        out = []
        for part in held:
            array = np.asarray(part.value)
            out.append(ShardableTensor(array, array.dtype, LOCAL_DEVICE, key, array.shape, part.spec, key, trackable))
        return out
    if isinstance(value, bytes):
        dtype, shape = np.dtype(object), ()
    else:
        array = np.asarray(value)
        dtype, shape = array.dtype, array.shape
    return [ShardableTensor(value, dtype, LOCAL_DEVICE, key, tuple(shape), "", key, trackable)]


def write_shard(writer: ShardWriter, shard: Shard) -> None:
    """Write one shard a callback decided (``{key: {slice_spec: value}}``) into ``writer`` and close it."""
    whole: list[tuple[str, Any]] = []  # runs of whole tensors go through add_many
    for key, parts in shard.items():
        for spec, value in parts.items():
            if spec:
                writer.add_many(whole)
                whole.clear()
                full_shape, extents = slices.parse_spec(spec)
                writer.add_slice(key, full_shape, extents, value)
            else:
                whole.append((key, value))
    writer.add_many(whole)
    writer.close()


def write_bundle(
    prefix: str,
    tensors: Sequence[tuple[str, Any]],
    sharding_callback: ShardingCallback | None = None,
    trackables: Sequence[Any] | None = None,
    keep_values: bool = True,
) -> str:
    """Write ``(key, value)`` tensors under ``prefix``; return ``prefix``.

    Args:
        prefix: The checkpoint prefix.
        tensors: In write order.
        sharding_callback: Splits tensors over data files; None (or ``ShardByTaskPolicy``)
            writes one file without building the sharding inputs.
        trackables: The owner of each tensor, offered to the callback.
        keep_values: Keep the values a restore of ``prefix`` still waits to hand out (an
            overwrite); False where the caller did (the save pipeline, for every committer).
    """
    prefix = os.fspath(prefix)
    if keep_values:
        kept_values.keep_values_of(prefix)
    with _write_errors(prefix):
        _write(prefix, tensors, sharding_callback, trackables)
    return prefix


def write_incremental_bundle(
    prefix: str, tensors: Sequence[tuple[str, Any]], previous: Previous | PreviousObjects | None
) -> Previous | PreviousObjects | None:
    """Write ``tensors`` under ``prefix`` as an incremental save after ``previous`` (see
    :mod:`.incremental`, and :mod:`.incremental_objects` at a URL); return the record for the
    next one (None in a store that cannot copy objects, where this writes the bundle whole)."""
    with _write_errors(prefix):
        if not storage_for(prefix).local_copies:
            return write_incremental(prefix, tensors, previous if isinstance(previous, Previous) else None, _ALONE)
        if server_copy.can_copy(prefix):
            before = previous if isinstance(previous, PreviousObjects) else None
            return write_incremental_objects(prefix, tensors, before, _ALONE)
        _write(prefix, tensors, None, None)
        return None


@contextlib.contextmanager
def _write_errors(prefix: str) -> Iterator[None]:
    """An ``OSError`` of a write as the :class:`WriteError` that says nothing was published and what to do."""
    try:
        yield
    except CheckpointError:
        raise
    except OSError as exc:
        raise WriteError(
            f"could not write checkpoint {prefix}: {exc}. Nothing of it was published; earlier "
            f"checkpoints are untouched. {write_remedy(exc)}",
            path=prefix,
        ) from exc


def write_remedy(exc: OSError) -> str:
    """What to do about ``exc``, a failed write of a checkpoint's files, in one sentence."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "Free disk space (or choose another directory, on a disk with room) and save again."
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "Fix the directory's permissions (or pick a writable one) and save again."
    if exc.errno == errno.ENOENT:
        return (
            "A file of this save, or its directory, was removed while it was written (by another process "
            "cleaning the directory?); save again."
        )
    return "Save again once the cause is fixed."


def _write(
    prefix: str,
    tensors: Sequence[tuple[str, Any]],
    sharding_callback: ShardingCallback | None,
    trackables: Sequence[Any] | None,
) -> None:
    if sharding_callback is None or type(sharding_callback) is ShardByTaskPolicy:
        writer = BundleWriter(prefix)
        try:
            writer.add_many(tensors)
        except BaseException:
            writer.abort()
            raise
        writer.finish(_ALONE)
        return
    owners = trackables if trackables is not None else [None] * len(tensors)
    shardable = [t for (key, value), owner in zip(tensors, owners) for t in shardable_tensors(key, value, owner)]
    shards = validate_shards(sharding_callback(shardable), shardable, sharding_callback.description)
    storage_for(prefix).prepare(prefix)
    count = len(shards)
    writers = [ShardWriter(naming.data_filename(prefix, i, count), i) for i in range(count)]
    try:
        parallel_map(lambda pair: write_shard(*pair), list(zip(writers, shards)), MAX_WRITER_THREADS)
        write_index(prefix, merge_shards(writers, _ALONE), count, [(w.temp_path, w.path) for w in writers])
    except BaseException:
        for shard_writer in writers:
            shard_writer.abort()
        raise
