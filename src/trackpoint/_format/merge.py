"""Merging separately written bundles into one (TensorFlow's ``MergeBundles``)."""

from __future__ import annotations

import os

from trackpoint._format import naming
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import write_index
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = ["merge_bundles"]


def merge_bundles(prefixes: list[str], merged_prefix: str) -> None:
    """Merge bundles into ``merged_prefix``, moving their data files and deleting their indexes.

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
            local_ids: dict[int, int] = {}
            for key in reader.raw_keys():
                proto = reader.entry(key).proto
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
                    moves.append((naming.data_filename(prefix, proto.shard_id, reader.num_shards), len(moves)))
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
