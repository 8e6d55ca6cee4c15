"""The ``.index`` file: an immutable sorted key/value table in LevelDB's SSTable layout.

The writer reproduces TensorFlow's ``TableBuilder`` byte for byte (data blocks of 256 KiB
with a restart point every 16 keys, an index block with one restart per key and
shortest separators, an empty metaindex block, the 48-byte footer). The reader is
:mod:`.sstable_read`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

from trackpoint._format import varint
from trackpoint._format.crc import crc32c, mask
from trackpoint._format.ragged import Strings, exclusive_cumsum, put_ranges, put_varints, varint_sizes
from trackpoint.errors import InvalidArgumentError

__all__ = ["BLOCK_SIZE", "RESTART_INTERVAL", "TABLE_MAGIC", "build_table", "build_table_columns"]

BLOCK_SIZE = 262144
RESTART_INTERVAL = 16
TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5
NO_COMPRESSION = 0
SNAPPY = 1  # read, never written
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


_BLOCK_TYPE = bytes((NO_COMPRESSION,))
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
