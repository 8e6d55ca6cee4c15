"""The entries of an index being written: plain tensors kept as columns, encoded in bulk.

A save appends one ``BundleEntryProto`` per tensor. For a plain tensor (numeric, whole,
C-contiguous) the entry differs from its neighbours only in its offset, size and
checksum, so the writer records its key (the ``str`` the save already holds), the
shared dtype-and-shape bytes and three machine integers, about 40 bytes, and this module
encodes every such entry at once, in key order, straight into the columns of the index
table (:func:`~trackpoint._format.sstable.build_table_columns`). Other entries (strings,
sliced tensors, the object graph) arrive encoded. See PERFORMANCE.md, "The first save".
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from trackpoint._format import varint, wire
from trackpoint._format.crc import mask_all
from trackpoint._format.keys import decode_key
from trackpoint._format.ragged import Strings, exclusive_cumsum, put_ranges, put_varints, varint_sizes
from trackpoint.errors import InvalidArgumentError

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
    """Every entry of an index: plain tensors as columns, others encoded by key.

    Attributes:
        names: The key of each plain row (as ``str``; encoded when the index is built).
        heads: Its dtype and shape fields (:func:`entry_head`; shared between rows).
        shard_ids, offsets, sizes, crcs: Its numbers (``crcs``: raw CRC-32C, masked in bulk).
        encoded: Key -> serialized entry, for everything else.

    A key given twice is found when the entries are sorted (:meth:`sorted_columns`).
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self.heads: list[bytes] = []
        self.shard_ids = array("q")
        self.offsets = array("Q")
        self.sizes = array("Q")
        self.crcs = array("Q")
        self.encoded: dict[bytes, bytes] = {}

    def __len__(self) -> int:
        return len(self.names) + len(self.encoded)

    def clear(self) -> None:
        """Forget every entry."""
        fresh = IndexEntries()
        self.names, self.heads, self.encoded = fresh.names, fresh.heads, fresh.encoded
        self.shard_ids, self.offsets, self.sizes, self.crcs = fresh.shard_ids, fresh.offsets, fresh.sizes, fresh.crcs

    def extend(self, other: IndexEntries) -> None:
        """Add the entries of ``other``."""
        self.names.extend(other.names)
        self.heads.extend(other.heads)
        self.shard_ids.extend(other.shard_ids)
        self.offsets.extend(other.offsets)
        self.sizes.extend(other.sizes)
        self.crcs.extend(other.crcs)
        for key, entry in other.encoded.items():
            self._add_encoded(key, entry)

    def _add_encoded(self, key: bytes, entry: bytes) -> None:
        if key in self.encoded:
            raise InvalidArgumentError(f"adding duplicate key {key!r}", key=decode_key(key))
        self.encoded[key] = entry

    def sorted_columns(self) -> tuple[Strings, Strings]:
        """The keys in order and the serialized entry of each, as two columns.

        A key added twice comes out twice (the table refuses it, naming it).
        """
        names, n = self.names, len(self.names)
        encoded = sorted(self.encoded)
        if encoded:  # one column of every key, encoded at once (surrogateescape gives back each key's bytes)
            names = names + [key.decode("utf-8", "surrogateescape") for key in encoded]
        keys = Strings.of(names, "surrogateescape")
        order = _key_order(names, keys)
        is_row = order < n
        plain = self._encode_rows(order[is_row])
        if not encoded:
            return keys.reordered(order), plain
        # The few encoded entries go among the rows: keep both in one column, pick in key order.
        values = plain.joined(Strings.of_bytes([self.encoded[key] for key in encoded]))
        positions = np.where(is_row, np.cumsum(is_row) - 1, len(plain) + np.cumsum(~is_row) - 1)
        return keys.reordered(order), values.reordered(positions)

    def _encode_rows(self, rows: np.ndarray) -> Strings:
        """The entries of these rows, in this order, as protobuf would serialize them.

        A few thousand rows at a time: each round's columns are a dozen integers per row.
        """
        heads = Strings.of_bytes(self.heads)
        columns = [
            np.frombuffer(column, np.uint64 if column.typecode == "Q" else np.int64) if len(column) else np.zeros(0)
            for column in (self.shard_ids, self.offsets, self.sizes, self.crcs)
        ]
        parts = [self._encode_some(heads, columns, rows[i : i + _ROWS]) for i in range(0, len(rows), _ROWS)]
        if len(parts) == 1:
            return parts[0]
        return Strings(
            np.concatenate([p.data for p in parts]) if parts else np.zeros(0, np.uint8),
            np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0, np.int64),
        )

    @staticmethod
    def _encode_some(heads: Strings, columns: list[np.ndarray], rows: np.ndarray) -> Strings:
        head_starts, head_lengths = heads.starts[rows], heads.lengths[rows]
        shard_ids, offsets, sizes, crcs = (column[rows] for column in columns)
        crcs = mask_all(crcs)
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


_ROWS = 8192  # rows encoded per round


def _key_order(names: list[str], keys: Strings) -> np.ndarray:
    """The order of ``names`` (encoded as ``keys``) by their stored bytes.

    Sorted as ``str`` where that is the same order: UTF-8 keeps code point order, except
    for the lone surrogates that stand for undecodable bytes, so keys holding one are
    sorted as bytes instead (slower; only keys read from damaged or foreign files).
    """
    if np.any(keys.data >= 0x80):  # not all ASCII
        try:
            "".join(names).encode("utf-8")  # raises on a lone surrogate
        except UnicodeEncodeError:
            stored = [keys.row(i) for i in range(len(names))]
            return np.array(sorted(range(len(names)), key=stored.__getitem__), np.int64)
    return np.array(sorted(range(len(names)), key=names.__getitem__), np.int64)
