"""Decoding many ``BundleEntryProto`` messages at once, as numpy columns.

A restore of a model with tens of thousands of variables decodes one index entry per
variable; field by field in Python that is the largest single cost of the restore. Here
all entries advance together: each step reads the next field of every entry with numpy.

Only the plain layout is decoded (``dtype``, ``shape`` with sized dimensions, ``shard_id``,
``offset``, ``size``, ``crc32c``, in any order). An entry with anything else (slices, named
dimensions, unknown rank, unknown fields, an over-long varint, a truncation) is flagged, and
the caller decodes it with protobuf, which also words the error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trackpoint._format.wire import (
    DIM_SIZE,
    ENTRY_CRC32C,
    ENTRY_DTYPE,
    ENTRY_OFFSET,
    ENTRY_SHAPE,
    ENTRY_SHARD_ID,
    ENTRY_SIZE,
    SHAPE_DIM,
)

__all__ = ["EntryColumns", "decode_spans", "distinct", "padded", "varints"]

_VARINT_FIELDS = (ENTRY_DTYPE, ENTRY_SHARD_ID, ENTRY_OFFSET, ENTRY_SIZE)
_KNOWN_TAGS = (*_VARINT_FIELDS, ENTRY_CRC32C, ENTRY_SHAPE)
_MAX_VARINT = 10
# Lets every window read past the last entry without a bounds check: a field's tag and varint
# here, an SSTable entry's three varints in block_lanes.
_PAD = bytes(3 * _MAX_VARINT)


def distinct(values: np.ndarray) -> list[int]:
    """The distinct values of a column of small non-negative integers (ranks, shard ids), ascending.

    ``np.unique`` would do, but its first call imports ``numpy.ma``, which would land on
    the first restore of every process; see PERFORMANCE.md.
    """
    return np.flatnonzero(np.bincount(values)).tolist() if len(values) else []


@dataclass(frozen=True)
class EntryColumns:
    """Fields of n entries, one numpy array per field.

    Attributes:
        plain: True where the entry was decoded here; the other rows hold zeros.
        dtype, shard_id, offset, size, crc32c: Per entry (signed where protobuf's are).
        ndim: Number of dimensions.
        dims: ``(n, max ndim)`` dimension sizes, zero past ``ndim``.
    """

    plain: np.ndarray
    dtype: np.ndarray
    shard_id: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    crc32c: np.ndarray
    ndim: np.ndarray
    dims: np.ndarray

    def shapes(self) -> list[tuple[int, ...]]:
        """Each entry's shape as a tuple (the tuples are built column-wise, in C)."""
        n = len(self.ndim)
        ranks = distinct(self.ndim)
        if len(ranks) == 1:  # one rank for all: no per-row work at all
            return list(zip(*[self.dims[:, j].tolist() for j in range(ranks[0])])) if ranks[0] else [()] * n
        shapes: list[tuple[int, ...]] = [()] * n
        for rank in ranks:
            rows = np.flatnonzero(self.ndim == rank)
            if rank == 0:
                continue
            columns = [self.dims[rows, j].tolist() for j in range(rank)]
            for row, shape in zip(rows.tolist(), zip(*columns)):
                shapes[row] = shape
        return shapes


def varints(data: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varints starting at ``pos``: ``(values as uint64, byte lengths, ok)``; ok is False when over-long.

    Byte by byte over the rows still going: most varints here are one or two bytes long.
    """
    first = data[pos]
    values = (first & 0x7F).astype(np.uint64)
    lengths = np.ones(len(pos), np.int64)
    ok = np.ones(len(pos), bool)
    rows = np.flatnonzero(first >= 0x80)
    k = 1
    while len(rows):
        if k == _MAX_VARINT:
            ok[rows] = False
            break
        byte = data[pos[rows] + k]
        values[rows] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        lengths[rows] += 1
        rows = rows[byte >= 0x80]
        k += 1
    return values, lengths, ok


def padded(data: bytes) -> np.ndarray:
    """``data`` as the uint8 array :func:`decode_spans` (and ``block_lanes``) read, with room to read past its end."""
    return np.frombuffer(data + _PAD, np.uint8)


def decode_spans(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> EntryColumns:
    """Decode the messages at ``data[starts[i]:ends[i]]``; ``data`` comes from :func:`padded`."""
    n = len(starts)
    starts = starts.astype(np.int64, copy=False)
    ends = ends.astype(np.int64, copy=False)

    plain = np.ones(n, bool)
    fields = {tag: np.zeros(n, np.uint64) for tag in _VARINT_FIELDS}
    crc = np.zeros(n, np.uint32)
    shape_start = np.full(n, -1, np.int64)
    shape_end = np.zeros(n, np.int64)
    pos = starts.copy()
    while True:
        rows = np.flatnonzero(plain & (pos < ends))
        if not len(rows):
            break
        tags = data[pos[rows]]
        for tag, column in fields.items():
            sel = rows[tags == tag]
            if len(sel):
                value, size, ok = varints(data, pos[sel] + 1)
                column[sel] = value
                pos[sel] += 1 + size
                plain[sel[~ok]] = False
        sel = rows[tags == ENTRY_CRC32C]  # fixed32 little-endian
        if len(sel):
            at = pos[sel] + 1
            crc[sel] = (
                data[at].astype(np.uint32)
                | data[at + 1].astype(np.uint32) << 8
                | data[at + 2].astype(np.uint32) << 16
                | data[at + 3].astype(np.uint32) << 24
            )
            pos[sel] += 5
        sel = rows[tags == ENTRY_SHAPE]  # a TensorShapeProto, parsed below
        if len(sel):
            length, size, ok = varints(data, pos[sel] + 1)
            plain[sel[~ok | (shape_start[sel] >= 0)]] = False  # a repeated shape would merge: leave it to protobuf
            shape_start[sel] = pos[sel] + 1 + size
            shape_end[sel] = shape_start[sel] + np.minimum(length, 1 << 40).astype(np.int64)
            pos[sel] = shape_end[sel]
        known = np.isin(tags, _KNOWN_TAGS)
        plain[rows[~known]] = False
    plain &= pos == ends  # a field ran past the entry's end

    # Dimensions: each is "SHAPE_DIM len [DIM_SIZE varint]" (an empty Dim is a dimension of size 0).
    ndim = np.zeros(n, np.int64)
    dim_columns: list[np.ndarray] = []
    cursor = np.where(shape_start >= 0, shape_start, 0)
    while True:
        rows = np.flatnonzero(plain & (shape_start >= 0) & (cursor < shape_end))
        if not len(rows):
            break
        at = cursor[rows]
        dim_len = data[at + 1].astype(np.int64)
        good = (data[at] == SHAPE_DIM) & (dim_len < 0x80)  # a one-byte length
        empty = good & (dim_len == 0)
        sized = good & (dim_len > 0) & (data[at + 2] == DIM_SIZE)
        value, size, ok = varints(data, at + 3)
        sized &= ok & (size + 1 == dim_len)
        column = np.zeros(n, np.uint64)
        column[rows[sized]] = value[sized]
        dim_columns.append(column)
        plain[rows[~(empty | sized)]] = False
        ndim[rows] += 1
        cursor[rows] = at + 2 + dim_len
    plain &= (shape_start < 0) | (cursor == shape_end)
    dims = np.stack(dim_columns, axis=1).view(np.int64) if dim_columns else np.zeros((n, 0), np.int64)

    # int32 fields whose values protobuf would truncate are left to protobuf.
    for column in (fields[ENTRY_DTYPE], fields[ENTRY_SHARD_ID]):
        value = column.view(np.int64)
        plain &= (value >= -(1 << 31)) & (value < 1 << 31)

    def signed(column: np.ndarray) -> np.ndarray:
        return np.where(plain, column.view(np.int64), 0)

    return EntryColumns(
        plain,
        signed(fields[ENTRY_DTYPE]),
        signed(fields[ENTRY_SHARD_ID]),
        signed(fields[ENTRY_OFFSET]),
        signed(fields[ENTRY_SIZE]),
        np.where(plain, crc, 0),
        np.where(plain, ndim, 0),
        np.where(plain[:, None], dims, 0),
    )
