"""Reading the ``.index`` file's SSTable (see :mod:`.sstable` for the layout), trusting nothing.

Every handle, length and restart array is checked against the bytes it has, every block
checksum is verified, and the keys must be strictly increasing; a damaged data block can be
skipped and described instead (for a verifier that goes on to report everything else).

Examples:
    >>> from trackpoint._format.sstable import build_table
    >>> table = read_table_spans(build_table([(b"a", b"1"), (b"b", b"22")]), "example")
    >>> table.keys, table.value(1)
    ([b'a', b'b'], b'22')
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass

import cramjam
import numpy as np

from trackpoint._format import block_lanes, varint
from trackpoint._format.crc import crc32c, unmask
from trackpoint._format.sstable import BLOCK_TRAILER_SIZE, FOOTER_SIZE, NO_COMPRESSION, SNAPPY, TABLE_MAGIC
from trackpoint.errors import DataLossError

__all__ = ["TableSpans", "read_table_spans"]


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
    if block_type == NO_COMPRESSION:
        return contents
    if block_type == SNAPPY:
        try:
            return memoryview(bytes(cramjam.snappy.decompress_raw(contents)))
        except Exception as exc:  # cramjam raises its own error type
            raise DataLossError(f"{what}: corrupt Snappy block at offset {offset}: {exc}") from exc
    raise DataLossError(f"{what}: unknown block compression type {block_type} at offset {offset}")


def _restarts(block: memoryview, what: str) -> tuple[int, np.ndarray]:
    """Where a block's entries end, and its restart offsets (checked only for fitting the block)."""
    if len(block) < 4:
        raise DataLossError(f"{what}: block of {len(block)} bytes is too short")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if num_restarts == 0 or limit < 0:
        raise DataLossError(f"{what}: bad restart array ({num_restarts} restarts in a {len(block)}-byte block)")
    return limit, np.frombuffer(block, "<u4", num_restarts, limit)


def _block_spans(block: memoryview, what: str, base: int = 0) -> tuple[bytes, list[bytes], np.ndarray, np.ndarray]:
    """A block's entries, one by one: ``(contents, keys, value starts, value ends)``, values as
    spans of contents (shifted by ``base``: where the contents will start once blocks are joined).
    The restart array is not used: a damaged one misleads nothing here."""
    limit, _ = _restarts(block, what)
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
    return data, keys, np.array(starts, np.int64), np.array(ends, np.int64)


def _block_entries(block: memoryview, what: str) -> list[tuple[bytes, bytes]]:
    data, keys, starts, ends = _block_spans(block, what)
    return [(key, data[a:b]) for key, a, b in zip(keys, starts.tolist(), ends.tolist())]


@dataclass(frozen=True)
class TableSpans:
    """A table's entries with the values left in place: value i is ``data[starts[i]:ends[i]]``.

    Reading an index with one entry per tensor this way builds no bytes object per value.
    """

    keys: list[bytes]
    data: bytes
    starts: np.ndarray
    ends: np.ndarray

    def value(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.ends[i])]


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
    blocks: list[tuple[int, memoryview]] = []  # each data block's offset and contents
    for _, handle in index:
        try:
            offset, size, _ = _decode_handle(handle, 0, f"{what} index entry")
            blocks.append((offset, _read_block(data, offset, size, what)))
        except DataLossError as exc:
            if damaged is None:
                raise
            damaged.append(str(exc))
    spans = _by_lanes(blocks) or _one_by_one(blocks, what, damaged)
    keys = spans.keys
    if not all(map(bytes.__lt__, keys, keys[1:])):  # in C; the loop below only names the culprit
        for a, b in itertools.pairwise(keys):
            if b <= a:
                raise DataLossError(f"{what}: keys out of order or repeated ({a!r}, {b!r})")
    return spans


def _by_lanes(blocks: list[tuple[int, memoryview]]) -> TableSpans | None:
    """Every data block's entries at once (:mod:`.block_lanes`); None where the lanes cannot vouch for them."""
    contents: list[bytes] = []
    starts: list[np.ndarray] = []
    base = 0
    for _, block in blocks:
        try:
            limit, restarts = _restarts(block, "")
        except DataLossError:
            return None  # read one by one, which words it
        if restarts[0] != 0:
            return None  # a run would reach back into the block before
        contents.append(bytes(block[:limit]))
        starts.append(restarts.astype(np.int64) + base)
        base += limit
    if not blocks:
        return None
    data = contents[0] if len(contents) == 1 else b"".join(contents)
    lanes = block_lanes.block_spans(data, np.concatenate(starts))
    return TableSpans(lanes[0], data, lanes[1], lanes[2]) if lanes is not None else None


def _one_by_one(blocks: list[tuple[int, memoryview]], what: str, damaged: list[str] | None) -> TableSpans:
    """Every data block's entries, each block read entry by entry; a damaged one skipped into ``damaged``."""
    keys: list[bytes] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    contents: list[bytes] = []
    base = 0
    for offset, block in blocks:
        try:
            held, block_keys, block_starts, block_ends = _block_spans(block, f"{what} data block at {offset}", base)
        except DataLossError as exc:
            if damaged is None:
                raise
            damaged.append(str(exc))
            continue
        keys += block_keys
        starts.append(block_starts)
        ends.append(block_ends)
        contents.append(held)
        base += len(held)
    data = contents[0] if len(contents) == 1 else b"".join(contents)
    empty = np.zeros(0, np.int64)
    return TableSpans(keys, data, np.concatenate(starts) if starts else empty, np.concatenate(ends) if ends else empty)
