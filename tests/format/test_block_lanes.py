"""Reading an index's blocks restart by restart (block_lanes) gives what reading them entry by entry gives.

Tables of random keys and values (long keys and values whose lengths take two-byte varints,
keys sharing long prefixes), written by the bulk writer and by the one-entry-at-a-time
reference; then the same tables with bytes changed: wherever the lanes answer, they agree
with the reading one by one, and where they do not, the reading one by one decides.
"""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format import reference_table
from trackpoint._format import block_lanes, sstable, sstable_read
from trackpoint._format.crc import crc32c, mask
from trackpoint._format.sstable import FOOTER_SIZE
from trackpoint.errors import DataLossError

stems = st.sampled_from([b"", b"model/", b"model/layer_with_weights-0/" * 6, b"\xff" * 130])
keys = st.lists(st.tuples(stems, st.binary(max_size=140)).map(b"".join), min_size=1, max_size=300, unique=True)


def _both(data: bytes) -> tuple[object, object]:
    """The table read with the lanes, and read entry by entry (each an exception's type if it raised)."""
    results = []
    for lanes in (block_lanes.block_spans, lambda *args: None):
        saved = block_lanes.block_spans
        block_lanes.block_spans = lanes
        try:
            table = sstable_read.read_table_spans(data, "t")
            results.append((table.keys, table.data, table.starts.tolist(), table.ends.tolist()))
        except DataLossError as exc:
            results.append(type(exc))
        finally:
            block_lanes.block_spans = saved
    return results[0], results[1]


@settings(max_examples=60, deadline=None)
@given(keys, st.data())
def test_the_lanes_read_every_table_as_the_reading_one_by_one_does(
    sorted_keys: list[bytes], data: st.DataObject
) -> None:
    sorted_keys = sorted(sorted_keys)
    values = [data.draw(st.binary(max_size=200)) for _ in sorted_keys]
    items = list(zip(sorted_keys, values))
    for table in (sstable.build_table(items), reference_table.build_table(items)):
        lanes, one_by_one = _both(table)
        assert lanes == one_by_one
        assert isinstance(lanes, tuple) and lanes[0] == sorted_keys


@settings(max_examples=150, deadline=None)
@given(keys, st.data())
def test_a_changed_byte_is_read_by_the_lanes_as_one_by_one_or_left_to_it(
    sorted_keys: list[bytes], data: st.DataObject
) -> None:
    """A data block's bytes changed (its checksum made right again, so that the block is parsed):
    the lanes give what the reading one by one gives, or refuse and leave the block to it."""
    items = [(key, key[::-1]) for key in sorted(sorted_keys)]
    table = bytearray(sstable.build_table(items))
    index = sstable_read._block_entries(sstable_read._read_block(bytes(table), *_index_handle(bytes(table))), "index")
    offset, size, _ = sstable_read._decode_handle(index[0][1], 0, "handle")  # the first data block
    at = data.draw(st.integers(offset, offset + size - 1))
    table[at] = data.draw(st.integers(0, 255))
    _fix_checksum(table, offset, size)
    lanes, one_by_one = _both(bytes(table))
    assert lanes == one_by_one


def _index_handle(table: bytes) -> tuple[int, int, str]:
    footer = memoryview(table)[len(table) - FOOTER_SIZE :]
    _, _, pos = sstable_read._decode_handle(footer, 0, "footer")
    offset, size, _ = sstable_read._decode_handle(footer, pos, "footer")
    return offset, size, "index"


def _fix_checksum(table: bytearray, offset: int, size: int) -> None:
    view = memoryview(table)
    crc = crc32c(view[offset + size : offset + size + 1], crc32c(view[offset : offset + size]))
    struct.pack_into("<I", table, offset + size + 1, mask(crc))
    del view


def test_restarts_that_are_not_entry_starts_are_refused() -> None:
    """Runs that do not end where the next begins, or start inside an entry: the lanes refuse."""
    items = [(f"key-{i:03d}".encode(), b"v" * i) for i in range(40)]
    table = sstable.build_table(items)
    index = sstable_read._block_entries(sstable_read._read_block(table, *_index_handle(table)), "index")
    offset, size, _ = sstable_read._decode_handle(index[0][1], 0, "handle")
    contents = memoryview(table)[offset : offset + size]
    limit, restarts = sstable_read._restarts(contents, "t")
    data = bytes(contents[:limit])
    assert block_lanes.block_spans(data, restarts) is not None
    shifted = restarts.copy()
    shifted[1] += 1  # a run starting one byte into an entry
    assert block_lanes.block_spans(data, shifted) is None
    assert block_lanes.block_spans(data, restarts[::-1].copy()) is None  # out of order
    assert block_lanes.block_spans(data, np.array([3], np.uint32)) is None  # not from the start
