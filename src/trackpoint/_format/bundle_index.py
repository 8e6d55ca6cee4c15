"""Opening a bundle's index file: its table read, its header checked, before any entry is decoded.

The index is an SSTable whose first entry (key ``b""``) is a ``BundleHeaderProto``: the
number of data shards, their byte order and the format version. Nothing in it is trusted: a
missing or malformed header, a newer format, no shards, or more shards than entries (every
shard holds at least one, which bounds what a hostile header can claim) raises here.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.zeros(2)})
    >>> index = read_index(prefix, prefix + ".index")
    >>> index.header.num_shards, index.table.keys
    (1, [b'', b'w'])
"""

from __future__ import annotations

import os
from typing import NamedTuple

from google.protobuf.message import DecodeError

from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.sstable_read import TableSpans, read_table_spans
from trackpoint._storage import files, naming
from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError

__all__ = ["Index", "read_index"]


class Index(NamedTuple):
    """An index file read and checked: its table, its header, and its stat (to tell it from a later one)."""

    table: TableSpans
    header: pb.BundleHeaderProto
    stat: os.stat_result


def read_index(
    prefix: str,
    index_path: str,
    damaged_blocks: list[str] | None = None,
    fetched: tuple[bytes, os.stat_result] | None = None,
) -> Index:
    """Read and check the index at ``index_path`` (of the checkpoint the caller named ``prefix``).

    Args:
        prefix: The prefix as the caller gave it (for the message when the index is missing).
        index_path: The index file to read.
        damaged_blocks: If given, damaged index blocks are skipped and recorded here.
        fetched: The index's bytes and stat, already fetched (at a URL), instead of reading it.

    Raises:
        NotFoundError: No index file.
        DataLossError: The table or its header is damaged.
        InvalidArgumentError: A newer format wrote it.
    """
    try:
        data, stat = (
            fetched
            if fetched is not None
            else files.read_regular(index_path, "checkpoint index", naming.MAX_INDEX_BYTES)
        )
    except NotFoundError as exc:
        raise NotFoundError(
            f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for {prefix}: "
            f"{index_path} does not exist. Pass the checkpoint prefix (e.g. 'dir/ckpt-1', without "
            "'.index'), or a directory holding a 'checkpoint' state file.",
            path=index_path,
        ) from exc
    try:
        table = read_table_spans(data, index_path, damaged_blocks)
    except DataLossError as exc:
        exc.path = exc.path or index_path  # the table's messages name the block, not only the file
        raise
    if not table.keys or table.keys[0] != b"":
        raise DataLossError(f"{index_path}: no bundle header entry; not a TensorFlow checkpoint index", path=index_path)
    header = pb.BundleHeaderProto()
    try:
        header.ParseFromString(table.value(0))
    except DecodeError as exc:
        raise DataLossError(f"{index_path}: malformed bundle header: {exc}", path=index_path) from exc
    if header.version.min_consumer > 1 or 1 in header.version.bad_consumers:
        raise InvalidArgumentError(
            f"{index_path}: written by a newer format (min_consumer={header.version.min_consumer}); upgrade trackpoint"
        )
    if header.num_shards < 1:
        raise DataLossError(f"{index_path}: header declares {header.num_shards} data shards", path=index_path)
    count = len(table.keys) - 1
    if count < header.num_shards and header.num_shards > 1:
        # every shard holds at least one entry; this bounds what a hostile header can claim
        raise DataLossError(f"{index_path}: {header.num_shards} shards declared for {count} entries", path=index_path)
    return Index(table, header, stat)
