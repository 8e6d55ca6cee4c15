"""Bundle tools only tests need: whole-table reads, protobuf views of entries, TF's ``MergeBundles``.

They were production code that no public path reached; tests use them to build damaged
files, to compare decoders with protobuf, and to check interoperability with TF's merge.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import numpy as np

from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.entry_columns import EntryColumns, decode_spans, padded
from trackpoint._format.index_write import write_index
from trackpoint._format.sstable_read import read_table_spans
from trackpoint._storage import naming
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = ["decode_entries", "index_items", "merge_bundles", "read_many", "read_table"]


def read_table(data: bytes, what: str, damaged: list[str] | None = None) -> list[tuple[bytes, bytes]]:
    """Parse a whole SSTable into its ``(key, value)`` pairs in key order (see ``read_table_spans``)."""
    table = read_table_spans(data, what, damaged)
    return [(key, table.data[a:b]) for key, a, b in zip(table.keys, table.starts, table.ends)]


def index_items(prefix: str) -> list[tuple[bytes, bytes]]:
    """The ``(key, serialized value)`` pairs of ``prefix.index``, the header first."""
    path = naming.index_filename(prefix)
    return read_table(pathlib.Path(path).read_bytes(), path)


def decode_entries(values: Sequence[bytes]) -> EntryColumns:
    """Decode serialized ``BundleEntryProto`` messages with ``entry_columns``."""
    n = len(values)
    lengths = np.fromiter(map(len, values), np.int64, n)
    starts = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return decode_spans(padded(b"".join(values)), starts, starts + lengths)


def read_many(reader: BundleReader, keys: Sequence[str]) -> list[np.ndarray | bytes]:
    """Several tensors read in one batch; results in the order of ``keys``."""
    return [value for batch in reader.read_batches(keys, 1 << 62) for value in batch]


def merge_bundles(prefixes: list[str], merged_prefix: str) -> None:
    """Merge bundles into ``merged_prefix`` as TF's ``MergeBundles`` does, moving their data files
    and deleting their indexes.

    Data files get global shard ids in first-seen order; slices of one tensor spread over
    several bundles are combined into one full entry. Entries are copied as stored, so
    their checksums carry over unchanged.

    Raises:
        InvalidArgumentError: A key appears whole in two bundles, or slices of one key
            disagree in dtype or shape.
    """
    entries: dict[bytes, pb.BundleEntryProto] = {}
    moves: list[tuple[str, int]] = []  # (old data path, new shard id)
    endianness = None
    for prefix in prefixes:
        with BundleReader(prefix) as reader:
            if endianness is None:
                endianness = reader.big_endian
            elif endianness != reader.big_endian:
                raise InvalidArgumentError(f"{prefix}: cannot merge bundles of different endianness")
            num_shards = reader.num_shards
        local_ids: dict[int, int] = {}
        for key, value in index_items(prefix)[1:]:
            proto = pb.BundleEntryProto.FromString(value)
            existing = entries.get(key)
            if existing is not None:
                if not (existing.slices and proto.slices):
                    raise InvalidArgumentError(f"{prefix}: duplicate tensor keyed by {key!r} in merged bundles")
                if existing.dtype != proto.dtype or existing.shape != proto.shape:
                    raise InvalidArgumentError(f"{prefix}: slices of {key!r} disagree in dtype or shape")
                existing.slices.extend(proto.slices)
                continue
            # Like TF, the full entry of a sliced tensor also takes the id of its bundle's
            # data file, so it counts for the first-seen numbering too.
            if proto.shard_id not in local_ids:
                local_ids[proto.shard_id] = len(moves)
                moves.append((naming.data_filename(prefix, proto.shard_id, num_shards), len(moves)))
            proto.shard_id = local_ids[proto.shard_id]
            entries[key] = proto
    if endianness:
        raise InvalidArgumentError(f"{merged_prefix}: merging big-endian bundles is not supported")
    for old, new_id in moves:
        if not os.path.exists(old):
            raise DataLossError(f"{old}: data file missing while merging into {merged_prefix}")
        os.replace(old, naming.data_filename(merged_prefix, new_id, len(moves)))
    write_index(merged_prefix, entries, max(len(moves), 1))
    for prefix in prefixes:
        os.unlink(naming.index_filename(prefix))
