"""The entries of an index being written: plain tensors kept as columns, encoded in bulk.

A save appends one ``BundleEntryProto`` per tensor. For a plain tensor (numeric, whole,
C-contiguous) the entry differs from its neighbours only in its offset, size and
checksum, so the writer records those numbers in lists and this module encodes every
such entry at once, in key order, straight into the values of the index table
(:func:`~trackpoint._format.sstable.build_table_columns`). Other entries (strings, sliced
tensors) arrive encoded. See PERFORMANCE.md, "The first save".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trackpoint._format import varint, wire
from trackpoint._format.crc import mask_all
from trackpoint._format.ragged import Strings, exclusive_cumsum, put_ranges, put_strings, put_varints, varint_sizes

__all__ = ["IndexEntries", "entry_head", "entry_heads"]

_DTYPE, _SHAPE, _DIM, _DIM_SIZE = (
    bytes((t,)) for t in (wire.ENTRY_DTYPE, wire.ENTRY_SHAPE, wire.SHAPE_DIM, wire.DIM_SIZE)
)
_HEADS: dict[tuple[int, tuple[int, ...]], bytes] = {}  # (dtype, shape) -> the entry's dtype and shape fields
_MAX_HEADS = 4096  # models repeat a few shapes; a table of every shape ever seen would only grow


def entry_head(dtype: int, shape: Sequence[int]) -> bytes:
    """The dtype and shape fields that begin a tensor's entry (the shape is always present)."""
    head_key = (dtype, shape if type(shape) is tuple else tuple(shape))
    head = _HEADS.get(head_key)
    if head is None:
        dims = b"".join(_dim(int(d)) for d in shape)
        head = _DTYPE + varint.encode(dtype) + _SHAPE + varint.encode(len(dims)) + dims
        if len(_HEADS) < _MAX_HEADS:
            _HEADS[head_key] = head
    return head


def entry_heads() -> dict[tuple[int, tuple[int, ...]], bytes]:
    """The heads built so far, by ``(dtype, shape)``: a writer looks each tensor's up here
    first, without a call (misses go to :func:`entry_head`)."""
    return _HEADS


def _dim(size: int) -> bytes:
    inner = _DIM_SIZE + varint.encode(size) if size else b""
    return _DIM + bytes((len(inner),)) + inner


class IndexEntries:
    """Every entry of an index, by key: plain tensors as columns, others encoded.

    Attributes:
        rows: Key -> row of the plain columns (``heads``, ``shard_ids``, ``offsets``,
            ``sizes``, ``crcs``: raw, unmasked CRC-32C).
        encoded: Key -> serialized entry, for everything else.
    """

    def __init__(self) -> None:
        self.rows: dict[bytes, int] = {}
        self.heads: list[bytes] = []
        self.shard_ids: list[int] = []
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        self.crcs: list[int] = []
        self.encoded: dict[bytes, bytes] = {}

    def __contains__(self, key: bytes) -> bool:
        return key in self.rows or key in self.encoded

    def __len__(self) -> int:
        return len(self.rows) + len(self.encoded)

    def extend(self, other: IndexEntries) -> None:
        """Add the entries of ``other`` (no key may be in both)."""
        base = len(self.heads)
        self.rows.update((key, base + row) for key, row in other.rows.items())
        self.heads.extend(other.heads)
        self.shard_ids.extend(other.shard_ids)
        self.offsets.extend(other.offsets)
        self.sizes.extend(other.sizes)
        self.crcs.extend(other.crcs)
        self.encoded.update(other.encoded)

    def sorted_columns(self) -> tuple[list[bytes], Strings]:
        """The keys in order, and the serialized entry of each, end to end."""
        row_keys = list(self.rows)  # in row order: rows are numbered as they are added
        all_keys = row_keys + list(self.encoded)
        # Saves add most keys nearly in order, so sorting the positions is quick.
        order = np.array(sorted(range(len(all_keys)), key=all_keys.__getitem__), np.int64)
        keys = [all_keys[i] for i in order.tolist()]
        is_row = order < len(row_keys)
        rows = np.array([self.rows[key] for key in row_keys], np.int64)[order[is_row]]
        plain = self._encode_rows(rows)
        if not self.encoded:
            return keys, plain
        # Splice the few encoded entries (strings, slices, the object graph) among the rows.
        others = [all_keys[i] for i in order[~is_row].tolist()]
        other_values = Strings.of_bytes([self.encoded[key] for key in others])
        lengths = np.empty(len(keys), np.int64)
        lengths[is_row] = plain.lengths
        lengths[~is_row] = other_values.lengths
        out = np.empty(int(lengths.sum()), np.uint8)
        at = exclusive_cumsum(lengths)
        put_strings(out, at[is_row], plain)
        put_strings(out, at[~is_row], other_values)
        return keys, Strings(out, lengths)

    def _encode_rows(self, rows: np.ndarray) -> Strings:
        """The entries of these rows, in this order, as protobuf would serialize them."""
        heads = Strings.of_bytes(self.heads)
        head_starts, head_lengths = exclusive_cumsum(heads.lengths)[rows], heads.lengths[rows]
        shard_ids = np.array(self.shard_ids, np.int64)[rows]
        offsets = np.array(self.offsets, np.uint64)[rows]
        sizes = np.array(self.sizes, np.uint64)[rows]
        crcs = mask_all(np.array(self.crcs, np.uint64)[rows])
        # Fields after the head, each absent when 0 (proto3 leaves defaults out).
        numbers = [(wire.ENTRY_SHARD_ID, shard_ids), (wire.ENTRY_OFFSET, offsets), (wire.ENTRY_SIZE, sizes)]
        field_sizes = [np.where(values != 0, 1 + varint_sizes(values), 0) for _, values in numbers]
        crc_sizes = np.where(crcs != 0, 5, 0)
        lengths = head_lengths + sum(field_sizes, np.zeros(len(rows), np.int64)) + crc_sizes
        out = np.empty(int(lengths.sum()), np.uint8)
        at = exclusive_cumsum(lengths)
        put_ranges(out, at, heads.data, head_starts, head_lengths)
        at = at + head_lengths
        for (tag, values), size in zip(numbers, field_sizes):
            present = values != 0
            out[at[present]] = tag
            put_varints(out, at[present] + 1, values[present])
            at = at + size
        present = crcs != 0
        out[at[present]] = wire.ENTRY_CRC32C
        out[at[present, None] + np.arange(1, 5)] = crcs[present].astype("<u4").view(np.uint8).reshape(-1, 4)
        return Strings(out, lengths)
