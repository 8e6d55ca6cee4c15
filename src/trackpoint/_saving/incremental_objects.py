"""Incremental saves at a URL: unchanged data objects are copied by the store, what changed is uploaded.

The object-store half of :mod:`.incremental`, with the same hashes and the same grouping: each
data object of the previous save whose tensors all hash as they did is copied on the server
under the new checkpoint's name (:func:`trackpoint._storage.server_copy.copy`: nothing is
uploaded for it, nothing is ever overwritten, and only the very bytes the previous save
wrote are copied); the rest is written and uploaded as by any save, and the index, put only if
absent, commits both. Every checkpoint is a complete TF bundle of objects of its own, so
deleting an older one (``max_to_keep``) leaves the newer whole.

A copy that cannot be made as the previous save's bytes (that object was deleted or replaced
since, or the store's ETags are no MD5s) is no failure: the tensors of that object are written
instead, into the data object of the same name, so the numbering of the others stands. The
record for the next save keeps each object's ETag, as one listing after the commit gives it,
and the index entries of its tensors, so that the next save reads nothing back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.bundle_writer import ShardWriter, encode_entry_after
from trackpoint._format.crc import mask
from trackpoint._format.dtypes import DType
from trackpoint._format.index_entries import IndexEntries, entry_head
from trackpoint._format.index_write import merge_shards, write_index
from trackpoint._format.keys import decode_key, encode_key
from trackpoint._format.slices import Extents
from trackpoint._format.threads import parallel_map
from trackpoint._saving.incremental import plan
from trackpoint._storage import naming, server_copy
from trackpoint._storage.storage import storage_for
from trackpoint.errors import CheckpointError

__all__ = ["PreviousObjects", "write_incremental_objects"]

_log = logging.getLogger("trackpoint")
_COPIES_IN_FLIGHT = 4  # a copy is a few requests that wait on the server

# A tensor's stored entry without its shard id: its dtype and shape fields, offset, size, masked crc32c.
_Stored = tuple[bytes, int, int, int]


@dataclass(frozen=True)
class _Object:
    """One data object of the previous save: its URL, ETag and size, and its tensors' entries."""

    url: str
    version: str
    size: int
    entries: tuple[tuple[str, _Stored], ...]

    @property
    def keys(self) -> list[str]:
        return [key for key, _ in self.entries]


@dataclass(frozen=True)
class PreviousObjects:
    """What an incremental save at a URL leaves for the next: its tensors' hashes and its objects."""

    prefix: str
    digests: dict[str, bytes]
    objects: tuple[_Object, ...]


class _CopiedShard:
    """A previous data object copied whole under a new shard id, as :func:`merge_shards` reads a shard."""

    def __init__(self, path: str, shard_id: int, stored: Sequence[tuple[str, _Stored]]) -> None:
        self.path = path
        self.shard_id = shard_id
        self.entries = IndexEntries()
        for key, (head, offset, size, crc) in stored:
            self.entries.encoded[encode_key(key)] = encode_entry_after(head, shard_id, offset, size, crc)
        self.sliced: dict[bytes, tuple[str, DType, tuple[int, ...], list[Extents]]] = {}


def _stored_entries(entries: IndexEntries) -> dict[str, _Stored] | None:
    """Each tensor's entry of a shard just written, without its shard id; None if one is sliced."""
    out: dict[str, _Stored] = {}
    for name, head, offset, size, crc in zip(
        entries.names, entries.heads, entries.offsets, entries.sizes, entries.crcs
    ):
        out[name] = (head, int(offset), int(size), mask(int(crc)))
    for key, blob in entries.encoded.items():  # strings: encoded one by one
        entry = pb.BundleEntryProto.FromString(blob)
        if entry.slices:
            return None
        head = entry_head(entry.dtype, tuple(d.size for d in entry.shape.dim))
        out[decode_key(key)] = (head, entry.offset, entry.size, entry.crc32c)
    return out


def _copyable(previous: PreviousObjects | None, digests: dict[str, bytes | None]) -> list[_Object]:
    """The previous objects whose every tensor is saved again with the same hash."""
    if previous is None:
        return []
    before = previous.digests
    return [
        o for o in previous.objects if all(digests.get(k) is not None and digests[k] == before.get(k) for k in o.keys)
    ]


def _copy_all(objects: Sequence[_Object], targets: Sequence[str], what: str) -> list[str | None]:
    """Copy each object to its target (see :func:`.server_copy.copy`); on a failure, withdraw
    the copies made and raise it."""

    def one(pair: tuple[_Object, str]) -> tuple[str | None, BaseException | None]:
        try:
            return server_copy.copy(pair[0].url, pair[0].version, pair[0].size, pair[1], what), None
        except BaseException as exc:  # noqa: BLE001 - raised below, once the others are withdrawn
            return None, exc

    outcomes = parallel_map(one, list(zip(objects, targets)), _COPIES_IN_FLIGHT)
    failures = [exc for _, exc in outcomes if exc is not None]
    if failures:
        server_copy.withdraw([(t, v) for t, (v, _) in zip(targets, outcomes) if v is not None], what)
        raise failures[0]
    return [version for version, _ in outcomes]


def write_incremental_objects(
    prefix: str, tensors: Sequence[tuple[str, Any]], previous: PreviousObjects | None, whole_remedy: str
) -> PreviousObjects:
    """Write ``tensors`` to URL ``prefix``, copying what :func:`_copyable` finds; return the record of this save.

    Raises:
        WriteError: An object is at a name of this save (another writer's), or a request
            failed; nothing was committed and what this save put is withdrawn.
        OSError: A local copy could not be written; likewise.
        InvalidArgumentError: As any save (a key given twice).
    """
    what = f"checkpoint {prefix}"
    values = dict(tensors)
    digests, candidates, groups = plan(tensors, previous, lambda d: _copyable(previous, d))
    total = len(candidates) + len(groups)
    storage_for(prefix).prepare(prefix)
    targets = [naming.data_filename(prefix, i, total) for i in range(len(candidates))]
    copies = _copy_all(candidates, targets, what)
    copied = [(target, version) for target, version in zip(targets, copies) if version is not None]
    shards = [
        _CopiedShard(t, i, o.entries) for i, (o, t, v) in enumerate(zip(candidates, targets, copies)) if v is not None
    ]
    # An object that could not be copied is written under its name; the new groups follow.
    jobs = [
        (ShardWriter(t, i), [(k, values[k]) for k in o.keys])
        for i, (o, t, v) in enumerate(zip(candidates, targets, copies))
        if v is None
    ]
    jobs += [
        (ShardWriter(naming.data_filename(prefix, len(candidates) + j, total), len(candidates) + j), g)
        for j, g in enumerate(groups)
    ]
    writers = [writer for writer, _ in jobs]
    try:

        def write(job: tuple[ShardWriter, list[tuple[str, Any]]]) -> None:
            job[0].add_many(job[1])
            job[0].close()

        parallel_map(write, jobs, 4)
        written = [_stored_entries(w.entries) for w in writers]  # the index takes them next
        write_index(
            prefix,
            merge_shards([*shards, *writers], whole_remedy),
            total,
            [(w.temp_path, w.path) for w in writers],
            others=[target for target, _ in copied],
        )
    except BaseException:
        for writer in writers:
            writer.abort()
        server_copy.withdraw(copied, what)
        raise
    stored = [(s.path, o.entries) for s, o in zip(shards, [o for o, v in zip(candidates, copies) if v is not None])]
    stored += [(w.path, tuple(e.items())) for w, e in zip(writers, written) if e is not None]
    return _record(prefix, digests, stored)


def _record(
    prefix: str, digests: dict[str, bytes | None], stored: Sequence[tuple[str, Sequence[tuple[str, _Stored]]]]
) -> PreviousObjects:
    """The record of a committed save: each object whose tensors all have a hash, with the ETag
    and size one listing gives (an object the listing does not show is left out: written again)."""
    try:
        found = server_copy.versions(prefix)
    except CheckpointError as exc:  # the checkpoint is committed: only the next save's copies are lost
        _log.warning("%s: could not list its objects (%s); the next incremental save uploads every tensor", prefix, exc)
        found = {}
    objects = []
    for url, entries in stored:
        if url in found and all(digests[k] is not None for k, _ in entries):
            version, size = found[url]
            objects.append(_Object(url, version, size, tuple(entries)))
    return PreviousObjects(prefix, {k: d for k, d in digests.items() if d is not None}, tuple(objects))
