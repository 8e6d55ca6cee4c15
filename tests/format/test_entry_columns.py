"""The vectorized entry decoder agrees with protobuf, and hands everything unusual back to it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format.bundle_helpers import decode_entries
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.bundle_writer import encode_entry

_int64 = st.integers(-(2**63), 2**63 - 1)
_int32 = st.integers(-(2**31), 2**31 - 1)


def _plain_entry(dtype: int, dims: list[int], shard: int, offset: int, size: int, crc: int) -> bytes:
    entry = pb.BundleEntryProto(dtype=dtype, shard_id=shard, offset=offset, size=size, crc32c=crc)
    entry.shape.SetInParent()
    for d in dims:
        entry.shape.dim.add().size = d
    return entry.SerializeToString()


def _fields(proto: pb.BundleEntryProto) -> tuple:
    return (proto.dtype, tuple(d.size for d in proto.shape.dim), proto.shard_id, proto.offset, proto.size, proto.crc32c)


def _row(columns, i: int, shapes) -> tuple:
    return (
        int(columns.dtype[i]),
        shapes[i],
        int(columns.shard_id[i]),
        int(columns.offset[i]),
        int(columns.size[i]),
        int(columns.crc32c[i]),
    )


@pytest.mark.slow  # a differential test against protobuf (hypothesis): seconds
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 300), st.lists(_int64, max_size=6), _int32, _int64, _int64, st.integers(0, 2**32 - 1)),
        min_size=1,
        max_size=40,
    )
)
def test_plain_entries_decode_like_protobuf(entries) -> None:
    values = [_plain_entry(*e) for e in entries]
    columns = decode_entries(values)
    shapes = columns.shapes()
    assert columns.plain.all()
    for i, value in enumerate(values):
        assert _row(columns, i, shapes) == _fields(pb.BundleEntryProto.FromString(value))


def test_our_encoder_and_unusual_entries() -> None:
    sliced = pb.BundleEntryProto(dtype=1, size=8)
    sliced.slices.add().extent.add().length = 2
    named = pb.BundleEntryProto(dtype=1)
    named.shape.dim.add(size=3, name="batch")
    unknown_rank = pb.BundleEntryProto(dtype=1)
    unknown_rank.shape.unknown_rank = True
    values = [
        encode_entry(1, (256, 3), 0, 123456, 3072, 99),
        sliced.SerializeToString(),
        named.SerializeToString(),
        unknown_rank.SerializeToString(),
        b"",
        b"\x08",
        b"\x08\x80",
        b"\x35\x01\x02",
        b"\x12\x05\x12\x03\x08\x80",
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        _plain_entry(1, [0, 5], 0, 0, 0, 0),
    ]
    columns = decode_entries(values)
    shapes = columns.shapes()
    assert columns.plain.tolist() == [True, False, False, False, True, False, False, False, False, False, True]
    assert _row(columns, 0, shapes) == (1, (256, 3), 0, 123456, 3072, 99)
    assert _row(columns, 4, shapes) == (0, (), 0, 0, 0, 0)  # an empty message: every field at its default
    assert shapes[10] == (0, 5)


@pytest.mark.slow  # a differential test against protobuf (hypothesis): seconds
@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=20))
def test_arbitrary_bytes_never_raise_and_plain_rows_match_protobuf(values) -> None:
    columns = decode_entries(values)
    shapes = columns.shapes()
    for i, value in enumerate(values):
        if columns.plain[i]:
            assert _row(columns, i, shapes) == _fields(pb.BundleEntryProto.FromString(value))


@pytest.mark.slow  # a differential test against protobuf (hypothesis): seconds
@settings(max_examples=500, deadline=None)
@given(st.integers(0, 30), st.lists(st.integers(0, 2**40), max_size=4), st.integers(0, 2**40), st.data())
def test_mutated_entries_are_flagged_or_decoded_like_protobuf(dtype, dims, offset, data) -> None:
    value = bytearray(_plain_entry(dtype, dims, 0, offset, 4, 7))
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at = data.draw(st.integers(0, max(0, len(value) - 1)))
        if action == "flip" and value:
            value[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del value[at:]
        else:
            value.insert(at, data.draw(st.integers(0, 255)))
    columns = decode_entries([bytes(value)])
    if columns.plain[0]:
        assert _row(columns, 0, columns.shapes()) == _fields(pb.BundleEntryProto.FromString(bytes(value)))
