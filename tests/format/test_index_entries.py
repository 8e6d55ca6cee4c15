"""Entries encoded in bulk are protobuf's encoding of each entry, in key order among the others."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trackpoint._format import index_entries
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.crc import mask
from trackpoint._format.index_entries import IndexEntries, entry_head

rows = st.tuples(
    st.integers(1, 200),  # dtype
    st.lists(st.integers(0, 2**40), max_size=4),  # dims
    st.integers(0, 2**31 - 1),  # shard id
    st.one_of(st.just(0), st.integers(0, 2**62)),  # offset
    st.one_of(st.just(0), st.integers(0, 2**62)),  # size
    st.integers(0, 2**32 - 1),  # raw crc
)


@pytest.mark.slow  # a differential test against protobuf (hypothesis): seconds
@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.binary(max_size=6), rows, max_size=30),
    st.dictionaries(st.binary(max_size=6), st.binary()),
    st.sampled_from([3, 8192]),
)
def test_rows_encode_as_protobuf(plain: dict, encoded: dict, rows_per_round: int) -> None:
    """Also a few rows per round: the rounds' columns join into the same bytes."""
    index_entries._ROWS = rows_per_round
    try:
        _check_rows(plain, encoded)
    finally:
        index_entries._ROWS = 8192


def _check_rows(plain: dict, encoded: dict) -> None:
    entries = IndexEntries()
    expected = {}
    for key, (dtype, dims, shard, offset, size, crc) in plain.items():
        entries.names.append(key.decode("utf-8", "surrogateescape"))
        entries.heads.append(entry_head(dtype, dims))
        entries.shard_ids.append(shard)
        entries.offsets.append(offset)
        entries.sizes.append(size)
        entries.crcs.append(crc)
        proto = pb.BundleEntryProto(dtype=dtype, shard_id=shard, offset=offset, size=size, crc32c=mask(crc))
        proto.shape.SetInParent()
        for d in dims:
            proto.shape.dim.add().size = d
        expected[key] = proto.SerializeToString()
    for key, value in encoded.items():
        if key not in plain:
            entries.encoded[key] = expected[key] = value
    keys, values = entries.sorted_columns()
    stored = [keys.row(i) for i in range(len(keys))]
    assert stored == sorted(expected)
    assert [values.row(i) for i in range(len(values))] == [expected[key] for key in stored]


def test_keys_sorted_by_their_stored_bytes() -> None:
    """A lone surrogate (an undecodable byte kept by surrogateescape) sorts by that byte,
    not by its code point: b"\\xff" comes after the UTF-8 of U+FFFF."""
    entries = IndexEntries()
    names = ["\udcff", "\uffff", "a", "é"]
    for i, name in enumerate(names):
        entries.names.append(name)
        entries.heads.append(entry_head(1, (i,)))
        entries.shard_ids.append(0)
        entries.offsets.append(i)
        entries.sizes.append(1)
        entries.crcs.append(0)
    entries.encoded["\u00ff".encode()] = b"x"
    keys, _ = entries.sorted_columns()
    stored = [keys.row(i) for i in range(len(keys))]
    assert stored == sorted([n.encode("utf-8", "surrogateescape") for n in names] + ["\u00ff".encode()])
