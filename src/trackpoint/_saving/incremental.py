"""Incremental saves (``CheckpointOptions(incremental=True)``): unchanged data files are linked, not written.

A checkpoint's saves remember, from one save to the next (:class:`Previous`, kept in the
checkpoint's ``SaveState``), the 128-bit content hash (xxh3-128) of every tensor they wrote and
which data file holds it. The next incremental save hashes its tensors again (at the speed of
memory, about 18 GB/s here) and:

1. links each previous data file whose tensors are all still there with the same hash (a hard
   link; a copy where the filesystem has none), its index entries kept but for the shard id;
2. writes the rest in new files: each tensor of :data:`OWN_FILE_BYTES` or more alone, the smaller
   ones that changed together, and the smaller ones that did not together, so that the tensors
   that stopped changing (a frozen backbone) share a file that the save after links whole.

Every checkpoint stays a complete TF bundle: a linked file is the same bytes under a new name,
and deleting an older checkpoint (``max_to_keep``) removes only its names. A hash is never
trusted alone: a previous file is linked only while its inode, size and modification time are
those it had when it was written (else its tensors are written again), and a tensor whose hash
cannot be taken (strings, slices) is always written.

At a URL the same hashes and groups decide which data objects the store copies on the server
(:mod:`.incremental_objects`).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import xxhash

from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import ShardWriter, encode_entry
from trackpoint._format.dtypes import DType
from trackpoint._format.index_entries import IndexEntries
from trackpoint._format.index_write import merge_shards, write_index
from trackpoint._format.keys import encode_key
from trackpoint._format.slices import Extents
from trackpoint._format.tensors import numeric_bytes_view
from trackpoint._format.threads import parallel_map
from trackpoint._storage import naming
from trackpoint._storage.atomic import remove_quietly
from trackpoint._storage.storage import storage_for

__all__ = ["OWN_FILE_BYTES", "Previous", "PreviousLike", "digest", "new_groups", "plan", "write_incremental"]

#: A tensor at least this large gets a data file of its own, so that it is linked or written alone.
OWN_FILE_BYTES = 4 << 20


@dataclass(frozen=True)
class _File:
    """One data file of the previous save: its final path, identity when written, and keys."""

    path: str
    identity: tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Previous:
    """What an incremental save leaves for the next: its prefix, its tensors' hashes, its files."""

    prefix: str
    index_identity: tuple[int, int, int, int]
    digests: dict[str, bytes]
    files: tuple[_File, ...]


def digest(value: Any) -> bytes | None:
    """The xxh3-128 hash of a tensor's bytes, dtype and shape; None when it has none to take."""
    if isinstance(value, bytes):
        return xxhash.xxh3_128_digest(value, seed=1)
    if type(value) is not np.ndarray or value.dtype.hasobject:
        return None
    head = f"{value.dtype.str}{value.shape}".encode()
    data = value if value.flags.c_contiguous else np.ascontiguousarray(value)
    return xxhash.xxh3_128_digest(head + xxhash.xxh3_128_digest(numeric_bytes_view(data)))


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _unchanged(path: str, identity: tuple[int, int, int, int]) -> bool:
    try:
        return _identity(os.stat(path)) == identity
    except OSError:
        return False


class _LinkedShard:
    """A previous data file taken whole under a new shard id, as :func:`merge_shards` reads a shard."""

    def __init__(self, source: str, path: str, shard_id: int, entries: IndexEntries) -> None:
        self.source = source
        self.path = path
        self.temp_path = storage_for(path).temp_path(path)
        self.shard_id = shard_id
        self.entries = entries
        self.sliced: dict[bytes, tuple[str, DType, tuple[int, ...], list[Extents]]] = {}

    def place(self) -> None:
        """Put the previous file's bytes at :attr:`temp_path`: a hard link, else a durable copy."""
        try:
            os.link(self.source, self.temp_path)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            shutil.copyfile(self.source, self.temp_path)
            fd = os.open(self.temp_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _linkable(previous: Previous | None, digests: dict[str, bytes | None]) -> list[_File]:
    """The previous files whose every tensor is saved again unchanged, and still as written."""
    if previous is None or not _unchanged(naming.index_filename(previous.prefix), previous.index_identity):
        return []
    return [
        f
        for f in previous.files
        if all(digests.get(k) is not None and digests[k] == previous.digests.get(k) for k in f.keys)
        and _unchanged(f.path, f.identity)
    ]


def new_groups(
    rest: Sequence[tuple[str, Any]], before: dict[str, bytes], digests: dict[str, bytes | None]
) -> list[list[tuple[str, Any]]]:
    """The new files' tensors: large ones alone; small changed ones; small unchanged ones
    (``before``: the previous save's hashes)."""
    alone, changed, kept = [], [], []
    for key, value in rest:
        if isinstance(value, np.ndarray) and value.nbytes >= OWN_FILE_BYTES:
            alone.append([(key, value)])
        elif digests[key] is not None and before.get(key) == digests[key]:
            kept.append((key, value))
        else:
            changed.append((key, value))
    return [group for group in (changed, kept) if group] + alone


class PreviousLike(Protocol):
    """What :func:`plan` reads of a previous save's record (:class:`Previous`, or an object store's)."""

    @property
    def digests(self) -> dict[str, bytes]: ...


class _Reused(Protocol):
    @property
    def keys(self) -> Sequence[str]: ...


_R = TypeVar("_R", bound=_Reused)


def plan(
    tensors: Sequence[tuple[str, Any]],
    previous: Previous | PreviousLike | None,
    reusable: Callable[[dict[str, bytes | None]], list[_R]],
) -> tuple[dict[str, bytes | None], list[_R], list[list[tuple[str, Any]]]]:
    """An incremental save's plan, local or not: each tensor's digest, the previous save's files
    that ``reusable`` finds whole again (linked or copied), and the groups of the other tensors
    (:func:`new_groups`), each a new data file."""
    digests = {key: digest(value) for key, value in tensors}
    reused = reusable(digests)
    taken = {k for r in reused for k in r.keys}
    before = previous.digests if previous is not None else {}
    return digests, reused, new_groups([(k, v) for k, v in tensors if k not in taken], before, digests)


def write_incremental(
    prefix: str, tensors: Sequence[tuple[str, Any]], previous: Previous | None, whole_remedy: str
) -> Previous:
    """Write ``tensors`` to ``prefix``, linking what :func:`_linkable` finds; return the record of this save.

    Raises:
        OSError: A file could not be written or linked; nothing was published.
        InvalidArgumentError: As any save (a key given twice, slices that do not tile).
    """
    digests, linked, groups = plan(tensors, previous, lambda d: _linkable(previous, d))
    total = len(linked) + len(groups)
    storage_for(prefix).prepare(prefix)
    shards: list[_LinkedShard] = []
    if linked:
        assert previous is not None
        taken = {k for f in linked for k in f.keys}
        with BundleReader(previous.prefix) as reader:
            stored = {e.key: e for e in reader.entries() if e.key in taken}
        for shard_id, f in enumerate(linked):
            entries = IndexEntries()
            for key in f.keys:
                e = stored[key]
                entries.encoded[encode_key(key)] = encode_entry(
                    e.dtype_enum, e.shape, shard_id, e.offset, e.size, e.crc32c
                )
            path = naming.data_filename(prefix, shard_id, total)
            shards.append(_LinkedShard(f.path, path, shard_id, entries))
    writers = [
        ShardWriter(naming.data_filename(prefix, len(linked) + i, total), len(linked) + i) for i in range(len(groups))
    ]
    try:
        for shard in shards:
            shard.place()

        def write(pair: tuple[ShardWriter, list[tuple[str, Any]]]) -> None:
            writer, group = pair
            writer.add_many(group)
            writer.close()

        parallel_map(write, list(zip(writers, groups)), 4)
        keys_of = [list(f.keys) for f in linked] + [[k for k, _ in group] for group in groups]
        files: list[_LinkedShard | ShardWriter] = [*shards, *writers]
        write_index(prefix, merge_shards(files, whole_remedy), total, [(s.temp_path, s.path) for s in files])
        for shard in shards:
            # A file linked onto its own name (a prefix written again) is one inode under both
            # names, and renaming one onto the other does nothing: the temporary name stays.
            remove_quietly(shard.temp_path)
    except BaseException:
        for writer in writers:
            writer.abort()
        for shard in shards:
            remove_quietly(shard.temp_path)
        raise
    return Previous(
        prefix,
        _identity(os.stat(naming.index_filename(prefix))),
        {k: d for k, d in digests.items() if d is not None},
        tuple(
            _File(s.path, _identity(os.stat(s.path)), tuple(keys))
            for s, keys in zip(files, keys_of)
            if all(digests[k] is not None for k in keys)
        ),
    )
