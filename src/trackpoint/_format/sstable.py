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
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = ["BLOCK_SIZE", "RESTART_INTERVAL", "TABLE_MAGIC", "TableSpans", "build_table", "read_table_spans"]

BLOCK_SIZE = 262144
RESTART_INTERVAL = 16
TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5
_NO_COMPRESSION = 0
_SNAPPY = 1
_MAX_HANDLE_SIZE = 20


class _BlockBuilder:
    """Prefix-compressed entries followed by the restart array."""

    def __init__(self, restart_interval: int) -> None:
        self._interval = restart_interval
        self._parts: list[bytes] = []
        self._size = 0  # bytes in _parts
        self._restarts = [0]
        self._counter = 0
        self._last_key = b""
        self.empty = True

    def add(self, key: bytes, value: bytes) -> None:
        self.add_many([(key, value)], 0)

    def add_many(
        self,
        items: list[tuple[bytes, bytes]],
        start: int,
        limit: int = 1 << 62,
        huge: int = 1 << 62,
        shared_prefixes: list[int] | None = None,
    ) -> int:
        """Add ``items[start]`` and those after it; return the index of the first one not added.

        Stops once the block's size estimate reaches ``limit``, or before an entry of
        ``huge`` bytes or more (other than the first), which the caller puts in a block of
        its own. One loop over many entries rather than a call per entry: an index holds
        one entry per tensor. ``shared_prefixes[i]``, if given, is the length of the prefix
        item ``i``'s key shares with item ``i - 1``'s.
        """
        parts, restarts, interval, encode = self._parts, self._restarts, self._interval, varint.encode
        append = parts.append
        counter, last_key, size = self._counter, self._last_key, self._size
        limit -= 4 * len(restarts) + 4  # the restart array grows by 4 bytes per restart, handled below
        end = len(items)
        i = start
        try:
            while i < end:
                key, value = items[i]
                key_len, value_len = len(key), len(value)
                if i > start and key_len + value_len >= huge:
                    break
                i += 1
                if counter == 0:  # the block's first entry
                    shared = 0
                elif counter < interval:
                    if shared_prefixes is not None:
                        shared = shared_prefixes[i - 1]  # i was advanced above
                    else:
                        shared = _shared_prefix(last_key, key)
                else:
                    restarts.append(size)
                    limit -= 4
                    counter = shared = 0
                unshared = key_len - shared
                if unshared < 0x80 and value_len < 0x80 and shared < 0x80:
                    header = bytes((shared, unshared, value_len))
                else:
                    header = encode(shared) + encode(unshared) + encode(value_len)
                append(header)
                append(key[shared:] if shared else key)
                append(value)
                size += len(header) + unshared + value_len
                last_key = key
                counter += 1
                if size >= limit:
                    break
        finally:
            self._counter, self._last_key, self._size = counter, last_key, size
            self.empty = self.empty and i == start
        return i

    def size_estimate(self) -> int:
        return self._size + 4 * len(self._restarts) + 4

    def finish(self) -> bytes:
        tail = struct.pack(f"<{len(self._restarts) + 1}I", *self._restarts, len(self._restarts))
        return b"".join(self._parts) + tail


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


def _shared_prefixes(keys: list[bytes]) -> list[int]:
    """``[0] + [shared prefix length of keys[i - 1] and keys[i]]``, for all keys at once.

    The keys are laid out as the rows of a zero-padded byte matrix; each row's first
    difference from the row above is an argmax. Keys longer than the matrix's width that
    agree over all of it are finished one by one.
    """
    n = len(keys)
    if n < 2:
        return [0] * n
    lengths = np.fromiter(map(len, keys), np.int64, n)
    width = int(min(lengths.max(), _VECTOR_KEY_BYTES))
    matrix = np.frombuffer(b"".join(k[:width].ljust(width, b"\0") for k in keys), np.uint8).reshape(n, width)
    differs = matrix[1:] != matrix[:-1]
    first = np.where(differs.any(axis=1), differs.argmax(axis=1), width)
    shared = np.minimum(first, np.minimum(lengths[1:], lengths[:-1]))
    out = [0] + shared.tolist()
    for i in np.flatnonzero(shared == width).tolist():  # equal over the whole width: look further
        out[i + 1] = _shared_prefix(keys[i], keys[i + 1])
    return out


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

    Args:
        items: Keys must be strictly increasing in unsigned bytewise order.

    Returns:
        The complete file contents, identical to what TensorFlow's TableBuilder writes.

    Raises:
        ValueError: The keys are not strictly increasing.
    """
    out = bytearray()
    data = _BlockBuilder(RESTART_INTERVAL)
    index = _BlockBuilder(1)
    pending_handle: bytes | None = None

    def write_block(contents: bytes) -> bytes:
        handle = _encode_handle(len(out), len(contents))
        out.extend(contents)
        trailer_type = bytes((_NO_COMPRESSION,))
        out.extend(trailer_type)
        out.extend(struct.pack("<I", mask(crc32c(trailer_type, crc32c(contents)))))
        return handle

    def flush() -> bytes | None:
        nonlocal data
        if data.empty:
            return None
        handle = write_block(data.finish())
        data = _BlockBuilder(RESTART_INTERVAL)
        return handle

    items = list(items)
    for (before, _), (key, _) in itertools.pairwise(items):
        if key <= before:
            raise InvalidArgumentError(f"table keys must be strictly increasing: {key!r} after {before!r}")
    shared_prefixes = _shared_prefixes([key for key, _ in items])
    i = 0
    while i < len(items):
        key, value = items[i]
        if i and len(key) + len(value) >= 2 * BLOCK_SIZE:
            pending_handle = flush() or pending_handle
        if pending_handle is not None and i:
            index.add(_shortest_separator(items[i - 1][0], key), pending_handle)
            pending_handle = None
        i = data.add_many(items, i, BLOCK_SIZE, 2 * BLOCK_SIZE, shared_prefixes)
        if data.size_estimate() >= BLOCK_SIZE:
            pending_handle = flush()
    last_key = items[-1][0] if items else None

    pending_handle = flush() or pending_handle
    metaindex_handle = write_block(_BlockBuilder(RESTART_INTERVAL).finish())
    if pending_handle is not None and last_key is not None:
        index.add(_short_successor(last_key), pending_handle)
    index_handle = write_block(index.finish())
    footer = (metaindex_handle + index_handle).ljust(2 * _MAX_HANDLE_SIZE, b"\0")
    out += footer + struct.pack("<II", TABLE_MAGIC & 0xFFFFFFFF, TABLE_MAGIC >> 32)
    return bytes(out)


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
