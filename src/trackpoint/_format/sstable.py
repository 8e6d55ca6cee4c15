"""The ``.index`` file: an immutable sorted key/value table in LevelDB's SSTable layout.

The writer reproduces TensorFlow's ``TableBuilder`` byte for byte (data blocks of 256 KiB
with a restart point every 16 keys, an index block with one restart per key and
shortest separators, an empty metaindex block, the 48-byte footer). The reader trusts
nothing: every handle, length and restart array is checked against the bytes it has,
and every block checksum is verified.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import cramjam
import numpy as np

from trackpoint._format import varint
from trackpoint._format.crc import crc32c, mask, unmask
from trackpoint._format.ragged import Strings, exclusive_cumsum, put_ranges, put_varints, varint_sizes
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = [
    "BLOCK_SIZE",
    "RESTART_INTERVAL",
    "TABLE_MAGIC",
    "TableSpans",
    "build_table",
    "build_table_columns",
    "read_table_spans",
]

BLOCK_SIZE = 262144
RESTART_INTERVAL = 16
TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5
_NO_COMPRESSION = 0
_SNAPPY = 1
_MAX_HANDLE_SIZE = 20


def _shared_prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b``.

    Computed in C rather than byte by byte in Python, since an index holds one key per
    tensor: read as big-endian integers, the two prefixes differ first in the highest
    byte where their XOR has a bit set.
    """
    n = min(len(a), len(b))
    diff = int.from_bytes(a[:n], "big") ^ int.from_bytes(b[:n], "big")
    return n - (diff.bit_length() + 7) // 8


_VECTOR_KEY_BYTES = 256  # keys are compared in numpy up to this length, longer ones in _shared_prefix


def _shared_prefixes(keys: Strings) -> np.ndarray:
    """``[0] + [shared prefix length of keys[i - 1] and keys[i]]``, for all keys at once.

    The keys are laid out as the rows of a zero-padded byte matrix, a few thousand rows at
    a time; each row's first difference from the row above is an argmax. Keys longer than
    the matrix's width that agree over all of it are finished one by one.
    """
    n = len(keys)
    out = np.zeros(n, np.int64)
    if n < 2:
        return out
    width = int(min(max(keys.lengths.max(), 1), _VECTOR_KEY_BYTES))
    rows = max(2, _MATRIX_BYTES // max(width, 1))
    for first in range(0, n - 1, rows - 1):  # chunks overlap by a row: each row needs the one above
        last = min(first + rows, n)
        lengths = keys.lengths[first:last]
        clipped = np.minimum(lengths, width)
        matrix = np.zeros((last - first) * width, np.uint8)
        put_ranges(matrix, np.arange(last - first, dtype=np.int64) * width, keys.data, keys.starts[first:last], clipped)
        rows_of = matrix.reshape(-1, width)
        differs = rows_of[1:] != rows_of[:-1]
        found = np.where(differs.any(axis=1), differs.argmax(axis=1), width)
        out[first + 1 : last] = np.minimum(found, np.minimum(lengths[1:], lengths[:-1]))
    for i in np.flatnonzero(out == width).tolist():  # equal over the whole width: look further
        if i:
            out[i] = _shared_prefix(keys.row(i - 1), keys.row(i))
    return out


_MATRIX_BYTES = 1 << 20  # bytes of the key matrix compared at a time


def _check_increasing(keys: Strings, shared: np.ndarray) -> None:
    """Raise unless every key is greater than the one before, bytewise.

    After the shared prefix, either the earlier key ends there and the later goes on, or
    both go on and the later's next byte is greater.
    """
    if len(keys) < 2:
        return
    before, after, common = keys.lengths[:-1], keys.lengths[1:], shared[1:]
    ok = (common == before) & (after > before)
    both = (common < before) & (common < after)
    next_before = keys.data[np.where(both, keys.starts[:-1] + common, 0)]
    next_after = keys.data[np.where(both, keys.starts[1:] + common, 0)]
    ok |= both & (next_after > next_before)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        previous, key = keys.row(i), keys.row(i + 1)
        if key == previous:
            raise InvalidArgumentError(f"adding duplicate key {key!r}", key=key.decode("utf-8", "surrogateescape"))
        raise InvalidArgumentError(f"table keys must be strictly increasing: {key!r} after {previous!r}")


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short key ``k`` with ``start <= k < limit`` (LevelDB's BytewiseComparator)."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i >= n:
        return start  # one is a prefix of the other
    byte = start[i]
    if byte < 0xFF and byte + 1 < limit[i]:
        return start[:i] + bytes((byte + 1,))
    return start


def _short_successor(key: bytes) -> bytes:
    """A short key ``k >= key``: the first byte below 0xff incremented, the rest dropped."""
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes((byte + 1,))
    return key


def _encode_handle(offset: int, size: int) -> bytes:
    return varint.encode(offset) + varint.encode(size)


def build_table(items: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Serialize strictly increasing ``(key, value)`` pairs as an SSTable.

    Every entry's place is computed for all entries at once and the blocks are written
    field by field (:mod:`trackpoint._format.ragged`): an index holds one entry per
    tensor, and building them one at a time was a large part of a save of many small ones.

    Args:
        items: Keys must be strictly increasing in unsigned bytewise order.

    Returns:
        The complete file contents, identical to what TensorFlow's TableBuilder writes.

    Raises:
        InvalidArgumentError: The keys are not strictly increasing.
    """
    items = list(items)
    return build_table_columns(
        Strings.of_bytes([key for key, _ in items]), Strings.of_bytes([value for _, value in items])
    )


def build_table_columns(keys: Strings, values: Strings) -> bytes:
    """:func:`build_table` of the pairs ``(keys[i], values[i])``, given as two columns."""
    entries = _Entries(keys, values)
    out: list[bytes] = []  # joined once at the end: no buffer grown and copied block by block
    size = 0

    def write_block(contents: bytes) -> bytes:
        nonlocal size
        handle = _encode_handle(size, len(contents))
        out.extend((contents, _BLOCK_TYPE, struct.pack("<I", mask(crc32c(_BLOCK_TYPE, crc32c(contents))))))
        size += len(contents) + BLOCK_TRAILER_SIZE
        return handle

    separators: list[bytes] = []
    handles: list[bytes] = []
    blocks = entries.blocks()
    for number, (start, end, shared, sizes) in enumerate(blocks):
        handles.append(write_block(entries.block(start, end, shared, RESTART_INTERVAL, sizes)))
        last = keys.row(end - 1)
        separators.append(
            _shortest_separator(last, keys.row(end)) if number + 1 < len(blocks) else _short_successor(last)
        )
    metaindex_handle = write_block(_EMPTY_BLOCK)
    index = _Entries(Strings.of_bytes(separators), Strings.of_bytes(handles))
    index_handle = write_block(index.block(0, len(separators), np.zeros(len(separators), np.int64), 1))
    out.append((metaindex_handle + index_handle).ljust(2 * _MAX_HANDLE_SIZE, b"\0"))
    out.append(struct.pack("<II", TABLE_MAGIC & 0xFFFFFFFF, TABLE_MAGIC >> 32))
    return b"".join(out)


_BLOCK_TYPE = bytes((_NO_COMPRESSION,))
_EMPTY_BLOCK = struct.pack("<II", 0, 1)  # no entries: the restart array [0] and its length
_WINDOW = 4096  # entries examined at a time when looking for a block's end


class _Entries:
    """A table's entries as columns, cut into data blocks as TF's TableBuilder cuts them.

    A block ends after the entry that brings its size estimate (entries, restart array,
    its length) to ``BLOCK_SIZE``; an entry of ``2 * BLOCK_SIZE`` bytes or more gets a
    block of its own. Within a block every ``RESTART_INTERVAL``-th entry stores its whole
    key; the others only what differs from the key before.
    """

    def __init__(self, keys: Strings, values: Strings) -> None:
        self.keys = keys
        self.values = values
        self.shared = _shared_prefixes(keys)
        _check_increasing(keys, self.shared)
        self.huge = keys.lengths + values.lengths >= 2 * BLOCK_SIZE

    def _sizes(self, start: int, end: int, shared: np.ndarray) -> np.ndarray:
        unshared = self.keys.lengths[start:end] - shared
        value_lengths = self.values.lengths[start:end]
        return varint_sizes(shared) + varint_sizes(unshared) + varint_sizes(value_lengths) + unshared + value_lengths

    def _shared_in_block(self, start: int, end: int, interval: int) -> np.ndarray:
        restart = np.arange(end - start) % interval == 0
        return np.where(restart, 0, self.shared[start:end])

    def blocks(self) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(start, end, shared prefix lengths, entry sizes)`` of each data block, in order."""
        n = len(self.keys.lengths)
        blocks = []
        start = 0
        while start < n:
            width = min(_WINDOW, n - start)
            while True:
                end = start + width
                shared = self._shared_in_block(start, end, RESTART_INTERVAL)
                restarts = np.arange(width) // RESTART_INTERVAL + 1
                sizes = self._sizes(start, end, shared)
                estimates = np.cumsum(sizes) + 4 * restarts + 4
                full = np.flatnonzero(estimates >= BLOCK_SIZE)
                cut = int(full[0]) + 1 if len(full) else width
                huge = np.flatnonzero(self.huge[start + 1 : start + cut])
                cut = int(huge[0]) + 1 if len(huge) else cut
                if cut < width or end == n:
                    break
                width = min(2 * width, n - start)
            blocks.append((start, start + cut, shared[:cut], sizes[:cut]))
            start += cut
        return blocks

    def block(self, start: int, end: int, shared: np.ndarray, interval: int, sizes: np.ndarray | None = None) -> bytes:
        """The contents of a block of entries ``start:end`` with these shared prefix lengths,
        a restart every ``interval`` entries (``sizes``: the entries' sizes, if known)."""
        if start == end:
            return _EMPTY_BLOCK
        if sizes is None:
            sizes = self._sizes(start, end, shared)
        at = exclusive_cumsum(sizes)
        size = int(sizes.sum())
        restarts = at[::interval].astype("<u4")
        out = np.empty(size + 4 * len(restarts) + 4, np.uint8)
        unshared = self.keys.lengths[start:end] - shared
        value_lengths = self.values.lengths[start:end]
        put_varints(out, at, shared)
        at = at + varint_sizes(shared)
        put_varints(out, at, unshared)
        at = at + varint_sizes(unshared)
        put_varints(out, at, value_lengths)
        at = at + varint_sizes(value_lengths)
        put_ranges(out, at, self.keys.data, self.keys.starts[start:end] + shared, unshared)
        put_ranges(out, at + unshared, self.values.data, self.values.starts[start:end], value_lengths)
        out[size : size + 4 * len(restarts)] = restarts.view(np.uint8)
        out[size + 4 * len(restarts) :] = np.array([len(restarts)], "<u4").view(np.uint8)
        return out.tobytes()


def _decode_handle(buf: bytes | memoryview, pos: int, what: str) -> tuple[int, int, int]:
    offset, pos = varint.decode(buf, pos, what)
    size, pos = varint.decode(buf, pos, what)
    return offset, size, pos


def _read_block(data: bytes, offset: int, size: int, what: str) -> memoryview:
    """Return a block's contents after checking its bounds and crc, decompressing Snappy."""
    end = offset + size
    if end + BLOCK_TRAILER_SIZE > len(data) - FOOTER_SIZE:
        raise DataLossError(f"{what}: block at offset {offset} with size {size} runs past the end of the file")
    view = memoryview(data)
    contents = view[offset:end]
    block_type = data[end]
    (stored,) = struct.unpack_from("<I", data, end + 1)
    actual = crc32c(view[end : end + 1], crc32c(contents))
    if unmask(stored) != actual:
        raise DataLossError(f"{what}: block checksum mismatch at offset {offset}; the index file is damaged")
    if block_type == _NO_COMPRESSION:
        return contents
    if block_type == _SNAPPY:
        try:
            return memoryview(bytes(cramjam.snappy.decompress_raw(contents)))
        except Exception as exc:  # cramjam raises its own error type
            raise DataLossError(f"{what}: corrupt Snappy block at offset {offset}: {exc}") from exc
    raise DataLossError(f"{what}: unknown block compression type {block_type} at offset {offset}")


def _block_spans(block: memoryview, what: str, base: int = 0) -> tuple[bytes, list[bytes], list[int], list[int]]:
    """A block's entries: ``(contents, keys, value starts, value ends)``, values as spans of contents
    (shifted by ``base``: where the contents will start once blocks are joined)."""
    if len(block) < 4:
        raise DataLossError(f"{what}: block of {len(block)} bytes is too short")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if num_restarts == 0 or limit < 0:
        raise DataLossError(f"{what}: bad restart array ({num_restarts} restarts in a {len(block)}-byte block)")
    data = bytes(block[:limit])  # slicing bytes is cheaper than slicing a memoryview and copying
    keys: list[bytes] = []
    starts: list[int] = []
    ends: list[int] = []
    add_key, add_start, add_end = keys.append, starts.append, ends.append
    key = b""
    pos = 0
    # One entry per variable: the three lengths are nearly always one-byte varints, so those
    # are read inline and only longer ones go through varint.decode (see PERFORMANCE.md).
    while pos < limit:
        shared = data[pos]
        if shared < 0x80:
            pos += 1
        else:
            shared, pos = varint.decode(data, pos, what, 5)
        unshared = data[pos] if pos < limit else 0x80
        if unshared < 0x80:
            pos += 1
        else:
            unshared, pos = varint.decode(data, pos, what, 5)
        value_len = data[pos] if pos < limit else 0x80
        if value_len < 0x80:
            pos += 1
        else:
            value_len, pos = varint.decode(data, pos, what, 5)
        end = pos + unshared
        if shared > len(key) or end + value_len > limit:
            raise DataLossError(f"{what}: corrupt block entry at byte {pos}")
        key = key[:shared] + data[pos:end] if shared else data[pos:end]
        add_key(key)
        add_start(base + end)
        pos = end + value_len
        add_end(base + pos)
    return data, keys, starts, ends


def _block_entries(block: memoryview, what: str) -> list[tuple[bytes, bytes]]:
    data, keys, starts, ends = _block_spans(block, what)
    return [(key, data[a:b]) for key, a, b in zip(keys, starts, ends)]


@dataclass(frozen=True)
class TableSpans:
    """A table's entries with the values left in place: value i is ``data[starts[i]:ends[i]]``.

    Reading an index with one entry per tensor this way builds no bytes object per value.
    """

    keys: list[bytes]
    data: bytes
    starts: list[int]
    ends: list[int]

    def value(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.ends[i]]


def read_table_spans(data: bytes, what: str, damaged: list[str] | None = None) -> TableSpans:
    """Parse a whole SSTable: its keys in order, and where each value lies.

    Args:
        data: The complete file contents.
        what: The file name, used in error messages.
        damaged: If given, a damaged data block is described here and skipped instead of
            raising, so a verifier can go on and report everything else.

    Raises:
        DataLossError: Bad magic, a handle out of bounds, a checksum mismatch, a corrupt
            block, or keys out of order.
    """
    if len(data) < FOOTER_SIZE:
        raise DataLossError(f"{what}: {len(data)} bytes is too short for an index file (truncated?)")
    magic_lo, magic_hi = struct.unpack_from("<II", data, len(data) - 8)
    if (magic_hi << 32) | magic_lo != TABLE_MAGIC:
        raise DataLossError(f"{what}: not an SSTable (bad magic number); the index file is damaged or of another kind")
    footer = memoryview(data)[len(data) - FOOTER_SIZE :]
    _, _, pos = _decode_handle(footer, 0, f"{what} footer")  # the metaindex is unused
    index_offset, index_size, _ = _decode_handle(footer, pos, f"{what} footer")
    index = _block_entries(_read_block(data, index_offset, index_size, what), f"{what} index block")
    keys: list[bytes] = []
    starts: list[int] = []
    ends: list[int] = []
    contents: list[bytes] = []
    base = 0
    for _, handle in index:
        try:
            offset, size, _ = _decode_handle(handle, 0, f"{what} index entry")
            block, block_keys, block_starts, block_ends = _block_spans(
                _read_block(data, offset, size, what), f"{what} data block at {offset}", base
            )
        except DataLossError as exc:
            if damaged is None:
                raise
            damaged.append(str(exc))
            continue
        keys += block_keys
        starts += block_starts
        ends += block_ends
        contents.append(block)
        base += len(block)
    if not all(map(bytes.__lt__, keys, keys[1:])):  # in C; the loop below only names the culprit
        for a, b in itertools.pairwise(keys):
            if b <= a:
                raise DataLossError(f"{what}: keys out of order or repeated ({a!r}, {b!r})")
    return TableSpans(keys, contents[0] if len(contents) == 1 else b"".join(contents), starts, ends)
