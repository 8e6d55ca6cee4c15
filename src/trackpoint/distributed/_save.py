"""Carrying out a save of several processes: each writes its data files, one commits the index.

1. Plan (on the calling thread, before ``save()`` returns, async or not): every rank sends
   its description to the root, which decides who writes what (:mod:`._plan`) or refuses.
2. Write (on the writer thread for async saves): each rank writes the tensors it owns into
   data files of its own, numbered globally once every rank has said how many it needs.
3. Commit: each rank sends the root its files' entries; the root merges them into the
   ``.index`` and publishes it last (so nothing is committed before every file is
   durable), then runs ``record`` (the state file). Its verdict reaches every rank, which
   returns or raises the same error. A rank that fails anywhere tells the others at once;
   one that dies is noticed once it stops saying it lives (see ``StoreCoordinator.alive``).
   Every rank removes its own temporary files unless the verdict says they were published.

The root renames the other ranks' files into place, so a save to a local path needs a
directory every rank sees (one machine, or a shared filesystem). At a URL, each rank uploads
its own data objects (only where nothing is) before it reports them, and the root's index,
put only if absent once every one is in place, is the commit; a rank whose save was not
committed deletes the objects it put.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trackpoint._io import ShardWriter, data_filename, parallel_map, slices, storage_for
from trackpoint._pipeline import (
    MAX_WRITER_THREADS,
    rank_files,
    shardable_tensors,
    validate_shards,
    wire,
    write_remedy,
    write_shard,
)
from trackpoint.distributed._coordinator import Coordinator
from trackpoint.distributed._plan import SHARDED, Description, decide, describe
from trackpoint.errors import CheckpointError, CoordinationError, InvalidArgumentError, WriteError
from trackpoint.sharding import Shard, ShardByTaskPolicy, ShardingCallback

__all__ = ["CoordinatedCommitter", "PlannedSave", "plan_save"]

_OK, _REFUSED = b"\x00", b"\x01"


def plan_save(
    coordinator: Coordinator, prefix: str, tensors: Sequence[tuple[str, Any]], io_rank: int | None
) -> PlannedSave:
    """Agree with the other ranks on who writes what of ``tensors`` (see the module docstring).

    Raises:
        InvalidArgumentError: On every rank, when the ranks' objects, paths or slices
            disagree; nothing was written.
        CoordinationError: Another rank failed or did not answer.
    """
    tag = coordinator.new_tag()
    root = io_rank if io_rank is not None else 0
    if io_rank is not None and not 0 <= io_rank < coordinator.world_size:
        raise InvalidArgumentError(
            f"experimental_io_device names task {io_rank}, but the job has {coordinator.world_size} ranks"
        )
    try:
        views = coordinator.gather(f"{tag}#plan", describe(prefix, tensors).encode(), root)
        if views is not None:
            try:
                owners = decide([Description.decode(v) for v in views], io_rank)
            except InvalidArgumentError as exc:
                coordinator.broadcast(f"{tag}#decision", _REFUSED + wire.to_json([str(exc), exc.key]), root)
                raise
            coordinator.broadcast(f"{tag}#decision", _OK + owners.tobytes(), root)
        else:
            decision = coordinator.broadcast(f"{tag}#decision", None, root)
            if decision[:1] == _REFUSED:
                message, key = wire.from_json(decision[1:])
                raise InvalidArgumentError(message, path=prefix, key=key)
            owners = np.frombuffer(decision[1:], dtype=np.int32)
            if len(owners) != len(tensors):
                raise CoordinationError(
                    f"{prefix}: the root's plan does not match this rank's {len(tensors)} tensors", path=prefix
                )
    except CoordinationError as exc:
        if exc.path is not None:
            raise
        raise _naming(exc, prefix, "; nothing was written") from exc
    return PlannedSave(coordinator, tag, prefix, owners, root, io_rank)


@dataclass(frozen=True)
class CoordinatedCommitter:
    """The committer (see :mod:`trackpoint._saving.committer`) of a save of several processes."""

    coordinator: Coordinator
    io_rank: int | None

    def plan(
        self, prefix: str, tensors: Callable[[], Sequence[tuple[str, Any]]], settle: Callable[[], None]
    ) -> PlannedSave:
        """Agree on the plan (see :func:`plan_save`) once this rank's previous save is done."""
        settle()  # the ranks' exchanges pair up in save order: a background save's come first
        return plan_save(self.coordinator, prefix, tensors(), self.io_rank)


@dataclass
class _Progress:
    """What this rank's part of a save did so far, for the cleanup of a failed one."""

    writers: list[ShardWriter] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)
    published: bool = False


@dataclass(frozen=True)
class PlannedSave:
    """A save the ranks agreed on; :meth:`write` writes and commits it (a ``Commit``)."""

    coordinator: Coordinator
    tag: str
    prefix: str
    owners: np.ndarray
    root: int
    io_rank: int | None

    records = True  # at the commit, on the root (see write)

    def write(
        self,
        tensors: Sequence[tuple[str, Any]],
        trackables: Sequence[Any],
        sharding_callback: ShardingCallback | None,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> None:
        """Write this rank's part, then commit (the root) or wait for the verdict (the others).

        ``record`` runs on the root once the checkpoint is committed, before the others
        learn so; ``follow`` runs on every other rank once they have.

        Raises:
            WriteError: The same failure on every rank (:class:`CoordinationError` on the
                ranks where it did not happen); nothing was committed unless it says so.
        """
        c, tag = self.coordinator, self.tag
        progress = _Progress()
        with c.alive(tag):
            try:
                total = self._write_files(tensors, trackables, sharding_callback, progress)
                self._commit(total, progress, record, follow)
            except BaseException as exc:
                if not isinstance(exc, CoordinationError):
                    c.fail(tag, _message(exc))
                if not progress.published:
                    for writer in progress.writers:
                        writer.abort()
                    _withdraw(progress.uploaded)
                translated = self._translated(exc)
                if translated is None:
                    raise
                raise translated from exc

    def _write_files(
        self,
        tensors: Sequence[tuple[str, Any]],
        trackables: Sequence[Any],
        sharding_callback: ShardingCallback | None,
        progress: _Progress,
    ) -> int:
        """Write this rank's data files (uploaded, at a URL, unless this rank commits); return
        how many the checkpoint has in all."""
        c, tag = self.coordinator, self.tag
        shards = _split(self._mine(tensors, trackables), sharding_callback)
        if c.rank == self.root:
            storage_for(self.prefix).prepare(self.prefix)  # before anyone writes: the others wait for the counts
        counts = [int(n) for n in c.all_gather(f"{tag}#counts", str(len(shards)).encode())]
        first, total = sum(counts[: c.rank]), sum(counts)
        progress.writers = [
            ShardWriter(data_filename(self.prefix, first + i, total), first + i) for i in range(len(shards))
        ]
        parallel_map(lambda pair: write_shard(*pair), list(zip(progress.writers, shards)), MAX_WRITER_THREADS)
        if c.rank != self.root:  # puts nothing unless the storage puts data ahead of the index
            progress.uploaded = rank_files.upload(self.prefix, progress.writers)
        return total

    def _commit(
        self,
        total: int,
        progress: _Progress,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> None:
        """Report this rank's files; the root publishes the index and records, then tells
        the others, which follow."""
        c, tag = self.coordinator, self.tag
        reports = c.gather(f"{tag}#entries", rank_files.encode(progress.writers), self.root)
        if reports is not None:
            files = [f for report in reports for f in rank_files.decode(report)]
            rank_files.publish(self.prefix, files, total, {w.path for w in progress.writers})
            progress.published = True
            if record is not None:
                record()
            c.broadcast(f"{tag}#verdict", b"", self.root)
            # Every rank read the plan and the counts before it sent its entries; the
            # verdict, which they may not have read yet, stays (a few bytes).
            c.release(f"{tag}#decision")
            c.release(f"{tag}#counts")
        else:
            c.broadcast(f"{tag}#verdict", None, self.root)
            progress.published = True
            if follow is not None:
                follow()

    def _translated(self, exc: BaseException) -> BaseException | None:
        """The error a failed save raises instead of ``exc``, or None to raise ``exc`` itself."""
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointError):
            return WriteError(
                f"could not write checkpoint {self.prefix}: {exc}. Nothing of it was published; earlier "
                f"checkpoints are untouched. {write_remedy(exc)}",
                path=self.prefix,
            )
        if isinstance(exc, CoordinationError) and exc.path is None:
            # Whether the root committed is unknown here: the message says only what failed.
            return _naming(exc, self.prefix)
        return None

    def _mine(self, tensors: Sequence[tuple[str, Any]], trackables: Sequence[Any]) -> list[tuple[str, Any, Any]]:
        """The ``(key, value, owner)`` this rank writes, in key order; at the I/O rank, the
        slices the others send it too."""
        c, owners, rank = self.coordinator, self.owners, self.coordinator.rank
        if len(owners) != len(tensors):
            raise CoordinationError(
                f"{self.prefix}: the plan does not match this rank's {len(tensors)} tensors", path=self.prefix
            )
        io = self.io_rank
        sharded = owners == SHARDED
        writes = (owners == rank) | (sharded & (io is None or io == rank))
        rows = [(i, *tensors[i], trackables[i]) for i in np.flatnonzero(writes).tolist()]
        if io is not None:
            sent = [(i, tensors[i][1]) for i in np.flatnonzero(sharded).tolist()] if rank != io else []
            received = c.gather(f"{self.tag}#ship", _ship(sent), io)
            if received is not None:
                for r, message in enumerate(received):
                    if r != io:
                        rows.extend((i, tensors[i][0], value, None) for i, value in _unship(message))
                rows.sort(key=lambda row: row[0])  # stable: one key's slices stay in rank order
        return [(key, value, owner) for _, key, value, owner in rows]


def _withdraw(urls: Sequence[str]) -> None:
    """Delete the data objects this rank uploaded for a save that was not committed."""
    if urls:
        storage_for(urls[0]).discard(urls, urls[0])


def _naming(exc: CoordinationError, prefix: str, outcome: str = "") -> CoordinationError:
    """``exc`` naming the checkpoint (the coordinator, which raised it, does not know it)."""
    return CoordinationError(f"{prefix}: {exc}{outcome}", path=prefix, key=exc.key)


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _split(rows: list[tuple[str, Any, Any]], callback: ShardingCallback | None) -> list[Shard]:
    """This rank's tensors as the shards of its data files (one unless a callback splits them)."""
    if not rows:
        return []
    if callback is None or type(callback) is ShardByTaskPolicy:
        shard: Shard = {}
        for key, value, _ in rows:
            held = slices.held_slices(value)
            for part in held if held is not None else ():
                shard.setdefault(key, {})[part.spec] = part.value
            if held is None:
                shard.setdefault(key, {})[""] = value
        return [shard]
    shardable = [t for key, value, owner in rows for t in shardable_tensors(key, value, owner)]
    return validate_shards(callback(shardable), shardable, callback.description)


def _ship(values: list[tuple[int, Any]]) -> bytes:
    """Slices this rank holds, for the I/O rank to write."""
    head, data = [], []
    for index, value in values:
        for part in slices.held_slices(value) or ():
            array = np.ascontiguousarray(part.value)
            head.append(
                [index, array.dtype.str, list(array.shape), list(part.full_shape), [list(e) for e in part.extents]]
            )
            data.append(array.tobytes())
    return wire.pack([wire.to_json(head), *data])


def _unship(message: bytes) -> list[tuple[int, slices.SlicedValue]]:
    parts = wire.unpack(message)
    head = wire.from_json(parts[0])
    out = []
    for (index, dtype, shape, full, extents), raw in zip(head, parts[1:]):
        array = np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape)
        out.append((int(index), slices.SlicedValue(array, tuple(full), tuple(tuple(e) for e in extents))))
    return out
