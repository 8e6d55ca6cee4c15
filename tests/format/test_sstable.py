"""The .index table: round trips, block boundaries, Snappy blocks, separators."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format import reference_table
from tests.format.bundle_helpers import read_table
from trackpoint._format import sstable
from trackpoint._format.ragged import Strings
from trackpoint.errors import DataLossError, InvalidArgumentError

keys = st.lists(st.binary(max_size=40), unique=True, max_size=300).map(sorted)


@settings(max_examples=60, deadline=None)
@given(keys, st.data())
def test_round_trip(sorted_keys: list[bytes], data: st.DataObject) -> None:
    items = [(k, data.draw(st.binary(max_size=3000))) for k in sorted_keys]
    table = sstable.build_table(items)
    assert read_table(table, "t") == items
    assert table == reference_table.build_table(items)


@pytest.mark.slow  # random tables (hypothesis): about a second
@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6000),
    st.integers(0, 200),
    st.lists(st.integers(0, 5999), max_size=3),
    st.sampled_from([1, sstable.BLOCK_SIZE - 20, 2 * sstable.BLOCK_SIZE]),
)
def test_blocks_cut_as_tensorflow_cuts_them(count: int, value_size: int, big_at: list[int], big: int) -> None:
    """Many entries (several blocks, restarts, block ends found past the first window) and
    a few large ones (near a block, or huge: a block of their own), byte for byte."""
    items = [(b"model/layer_%05d/.ATTRIBUTES/VARIABLE_VALUE" % i, b"v" * value_size) for i in range(count)]
    for i in big_at:
        if i < count:
            items[i] = (items[i][0], b"x" * big)
    assert sstable.build_table(items) == reference_table.build_table(items)


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


def test_reads_snappy_compressed_blocks() -> None:
    items = [(b"key%03d" % i, b"value" * 20) for i in range(100)]
    assert read_table(reference_table.build_table(items, block_type=1), "t") == items


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


@pytest.mark.slow  # random key lists (hypothesis): about a second
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
        assert _shared_prefixes(Strings.of_bytes(variant)).tolist() == expected


def test_chunked_layout_matches(monkeypatch) -> None:
    """Keys compared and bytes copied a few at a time give the same table as all at once."""
    from trackpoint._format import ragged

    items = [(b"model/%05d/.ATTRIBUTES/VARIABLE_VALUE" % i, b"v" * (i % 7)) for i in range(3000)]
    expected = reference_table.build_table(items)
    monkeypatch.setattr(sstable, "_MATRIX_BYTES", 64)
    monkeypatch.setattr(ragged, "_COPY_BYTES", 100)
    assert sstable.build_table(items) == expected
