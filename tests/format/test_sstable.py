"""The .index table: round trips, block boundaries, Snappy blocks, separators."""

from __future__ import annotations

import itertools
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format.bundle_helpers import read_table
from trackpoint._format import sstable
from trackpoint._format.crc import crc32c, mask
from trackpoint.errors import DataLossError, InvalidArgumentError

keys = st.lists(st.binary(max_size=40), unique=True, max_size=300).map(sorted)


@settings(max_examples=60, deadline=None)
@given(keys, st.data())
def test_round_trip(sorted_keys: list[bytes], data: st.DataObject) -> None:
    items = [(k, data.draw(st.binary(max_size=3000))) for k in sorted_keys]
    assert read_table(sstable.build_table(items), "t") == items


def test_many_blocks_and_an_entry_larger_than_two_blocks() -> None:
    items = [(b"k%06d" % i, b"v" * 1000) for i in range(1000)]
    items.insert(500, (b"k000499z", b"x" * (2 * sstable.BLOCK_SIZE)))
    table = sstable.build_table(items)
    assert read_table(table, "t") == items


def test_rejects_unsorted_keys() -> None:
    with pytest.raises(InvalidArgumentError):
        sstable.build_table([(b"b", b""), (b"a", b"")])


@pytest.mark.parametrize(
    "start, limit, expected",
    [
        (b"abc", b"abe", b"abd"),  # room between the differing bytes
        (b"abc", b"abd", b"abc"),  # adjacent: unchanged
        (b"ab", b"abc", b"ab"),  # prefix: unchanged
        (b"a\xff", b"b", b"a\xff"),
        (b"a\x05zz", b"a\x09", b"a\x06"),
    ],
)
def test_shortest_separator(start: bytes, limit: bytes, expected: bytes) -> None:
    assert sstable._shortest_separator(start, limit) == expected


def test_short_successor() -> None:
    assert sstable._short_successor(b"save_counter/x") == b"t"
    assert sstable._short_successor(b"\xff\xffa") == b"\xff\xffb"
    assert sstable._short_successor(b"\xff") == b"\xff"


def _snappy_table(items: list[tuple[bytes, bytes]]) -> bytes:
    """A table whose data block is Snappy-compressed, as LevelDB's default options write it."""
    block = sstable._BlockBuilder(sstable.RESTART_INTERVAL)
    for k, v in items:
        block.add(k, v)
    out = bytearray()

    def write(contents: bytes, block_type: int) -> bytes:
        handle = sstable._encode_handle(len(out), len(contents))
        out.extend(contents + bytes((block_type,)))
        out.extend(struct.pack("<I", mask(crc32c(bytes((block_type,)), crc32c(contents)))))
        return handle

    data_handle = write(bytes(cramjam.snappy.compress_raw(block.finish())), 1)
    meta_handle = write(sstable._BlockBuilder(16).finish(), 0)
    index = sstable._BlockBuilder(1)
    index.add(sstable._short_successor(items[-1][0]), data_handle)
    index_handle = write(index.finish(), 0)
    out += (meta_handle + index_handle).ljust(40, b"\0") + struct.pack("<Q", sstable.TABLE_MAGIC)
    return bytes(out)


def test_reads_snappy_compressed_blocks() -> None:
    items = [(b"key%03d" % i, b"value" * 20) for i in range(100)]
    assert read_table(_snappy_table(items), "t") == items


def test_damaged_tables() -> None:
    table = sstable.build_table([(b"", b"h"), (b"a", b"1")])
    with pytest.raises(DataLossError, match="bad magic"):
        read_table(table[:-1] + b"\0", "t")
    with pytest.raises(DataLossError, match="too short"):
        read_table(table[:20], "t")
    flipped = bytearray(table)
    flipped[4] ^= 0x01
    with pytest.raises(DataLossError, match="checksum"):
        read_table(bytes(flipped), "t")


@given(st.binary(max_size=12), st.binary(max_size=12))
def test_shared_prefix_is_the_longest_common_prefix(a: bytes, b: bytes) -> None:
    from trackpoint._format.sstable import _shared_prefix

    n = _shared_prefix(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.binary(max_size=12), st.binary(min_size=250, max_size=300)), max_size=30, unique=True).map(
        sorted
    ),
    st.binary(min_size=1, max_size=400),
)
def test_shared_prefixes_match_pairwise(keys: list[bytes], common: bytes) -> None:
    from trackpoint._format.sstable import _shared_prefix, _shared_prefixes

    for variant in (keys, sorted({common + k for k in keys})):  # long common prefixes past the vector width
        expected = [0] + [_shared_prefix(a, b) for a, b in itertools.pairwise(variant)] if variant else []
        assert _shared_prefixes(variant) == expected
