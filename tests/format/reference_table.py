"""LevelDB's TableBuilder written one entry at a time: the reference the bulk writer must match.

This is how ``sstable.build_table`` was written before it laid out all entries at once;
TF 2.21's files, the golden tests and the interop tests agreed with it byte for byte.
"""

from __future__ import annotations

import struct

from trackpoint._format import sstable, varint
from trackpoint._format.crc import crc32c, mask


class BlockBuilder:
    """Prefix-compressed entries, then the restart array."""

    def __init__(self, restart_interval: int) -> None:
        self.interval = restart_interval
        self.parts: list[bytes] = []
        self.size = 0
        self.restarts = [0]
        self.counter = 0
        self.last_key = b""

    @property
    def empty(self) -> bool:
        return not self.parts

    def add(self, key: bytes, value: bytes) -> None:
        if self.counter < self.interval:
            shared = 0
            if self.counter:
                while shared < min(len(key), len(self.last_key)) and key[shared] == self.last_key[shared]:
                    shared += 1
        else:
            self.restarts.append(self.size)
            self.counter = shared = 0
        entry = varint.encode(shared) + varint.encode(len(key) - shared) + varint.encode(len(value))
        entry += key[shared:] + value
        self.parts.append(entry)
        self.size += len(entry)
        self.last_key = key
        self.counter += 1

    def size_estimate(self) -> int:
        return self.size + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return b"".join(self.parts) + struct.pack(f"<{len(self.restarts) + 1}I", *self.restarts, len(self.restarts))


def build_table(items: list[tuple[bytes, bytes]], block_type: int = 0) -> bytes:
    """The table of sorted ``items``; with ``block_type`` 1, data blocks Snappy-compressed."""
    import cramjam

    out = bytearray()

    def write_block(contents: bytes, kind: int = 0) -> bytes:
        if kind == 1:
            contents = bytes(cramjam.snappy.compress_raw(contents))
        handle = varint.encode(len(out)) + varint.encode(len(contents))
        out.extend(contents + bytes((kind,)))
        out.extend(struct.pack("<I", mask(crc32c(bytes((kind,)), crc32c(contents)))))
        return handle

    data, index = BlockBuilder(sstable.RESTART_INTERVAL), BlockBuilder(1)
    pending: bytes | None = None
    for i, (key, value) in enumerate(items):
        if not data.empty and len(key) + len(value) >= 2 * sstable.BLOCK_SIZE:  # a huge entry: a block of its own
            pending = write_block(data.finish(), block_type)
            data = BlockBuilder(sstable.RESTART_INTERVAL)
        if pending is not None:
            index.add(sstable._shortest_separator(items[i - 1][0], key), pending)
            pending = None
        data.add(key, value)
        if data.size_estimate() >= sstable.BLOCK_SIZE:
            pending = write_block(data.finish(), block_type)
            data = BlockBuilder(sstable.RESTART_INTERVAL)
    if not data.empty:
        pending = write_block(data.finish(), block_type)
    metaindex = write_block(BlockBuilder(sstable.RESTART_INTERVAL).finish())
    if pending is not None:
        index.add(sstable._short_successor(items[-1][0]), pending)
    index_handle = write_block(index.finish())
    out += (metaindex + index_handle).ljust(40, b"\0") + struct.pack("<Q", sstable.TABLE_MAGIC)
    return bytes(out)
