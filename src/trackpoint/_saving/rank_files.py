"""The data files a rank wrote, as it reports them to the rank that commits the index, and
that commit: every file's entries merged into the ``.index``, published last.

Used by trackpoint's own saves of several processes (:mod:`trackpoint.distributed`) and by the
storage under ``torch.distributed.checkpoint`` (:mod:`trackpoint.torch`), through :mod:`trackpoint._pipeline`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from trackpoint._format import slices
from trackpoint._format.bundle_writer import ShardWriter
from trackpoint._format.dtypes import DTYPES, DType
from trackpoint._format.index_entries import IndexEntries
from trackpoint._format.index_write import merge_shards, write_index
from trackpoint._format.keys import encode_key
from trackpoint._saving import wire
from trackpoint._storage import atomic
from trackpoint._storage.storage import storage_for
from trackpoint.errors import CoordinationError, WriteError

__all__ = ["Reported", "decode", "encode", "publish", "upload"]


@dataclass(frozen=True)
class Reported:
    """A data file a rank wrote, as :func:`merge_shards` reads it."""

    path: str
    temp_path: str
    shard_id: int
    entries: IndexEntries
    sliced: dict[bytes, tuple[str, DType, tuple[int, ...], list[slices.Extents]]]


def encode(writers: Sequence[ShardWriter]) -> bytes:
    """The report of ``writers``' files (closed): names, entries and slices."""
    head = [
        [
            w.path,
            w.temp_path,
            w.shard_id,
            [[n, d.enum, list(s), [list(map(list, e)) for e in p]] for n, d, s, p in w.sliced.values()],
        ]
        for w in writers
    ]
    return wire.pack([wire.to_json(head), *(part for w in writers for part in wire.encode_entries(w.entries))])


def decode(message: bytes) -> list[Reported]:
    """The files of a report :func:`encode` made."""
    parts = wire.unpack(message)
    head = wire.from_json(parts[0])
    n = wire.ENTRY_PARTS
    if len(parts) != 1 + n * len(head):
        raise CoordinationError("a peer sent a damaged message (file reports)")
    out = []
    for j, (path, temp, shard_id, sliced) in enumerate(head):
        entries = wire.decode_entries(parts[1 + n * j : 1 + n * (j + 1)])
        table = {
            encode_key(name): (name, DTYPES[dtype], tuple(shape), [tuple(map(tuple, e)) for e in extents])
            for name, dtype, shape, extents in sliced
        }
        out.append(Reported(path, temp, int(shard_id), entries, table))
    return out


def upload(prefix: str, writers: Sequence[ShardWriter]) -> list[str]:
    """On a rank but the committing one, where the storage puts data files ahead of the index (at
    a URL): put this rank's closed data files in place (each only where nothing is) before that
    rank commits the index, and remove the local copies; return their paths. Elsewhere nothing is
    put: the committing rank renames every file with the index."""
    put = storage_for(prefix).put_data([(w.temp_path, w.path) for w in writers], prefix)
    for temp, _ in put:
        atomic.remove_quietly(temp)
    return [path for _, path in put]


def publish(prefix: str, shards: Sequence[Reported], total: int, own: Collection[str]) -> None:
    """Merge the entries of every rank's files into the index of ``prefix`` and publish it last.

    ``own`` are the paths of this process's files. At a local path every file is renamed into place here,
    so the others' must be visible (a directory every rank shares); at a URL the others
    uploaded theirs, and the index goes up once they are all there.

    Raises:
        WriteError: Nothing was published; the message says why.
    """
    if len(shards) != total:
        raise CoordinationError(f"{prefix}: {len(shards)} data files reported where {total} were planned")
    ahead = storage_for(prefix).data_put_ahead  # the other ranks put their data files already
    missing = [] if ahead else [s.temp_path for s in shards if not os.path.exists(s.temp_path)]
    if missing:
        raise WriteError(
            f"could not write checkpoint {prefix}: the data file {missing[0]} another rank wrote is not visible to "
            "the committing rank; a save of several processes to a local path needs a directory every rank "
            "shares (one machine or a shared filesystem). Nothing was published.",
            path=prefix,
        )
    mine = [s for s in shards if not ahead or s.path in own]
    others = [s.path for s in shards if ahead and s.path not in own]
    write_index(prefix, merge_shards(shards), total, [(s.temp_path, s.path) for s in mine], others=others)
