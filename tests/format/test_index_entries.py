"""Entries encoded in bulk are protobuf's encoding of each entry, in key order among the others."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


def _split(values) -> list[bytes]:
    data, out, start = values.data.tobytes(), [], 0
    for n in values.lengths.tolist():
        out.append(data[start : start + n])
        start += n
    return out


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.binary(max_size=6), rows, max_size=30), st.dictionaries(st.binary(max_size=6), st.binary()))
def test_rows_encode_as_protobuf(plain: dict, encoded: dict) -> None:
    entries = IndexEntries()
    expected = {}
    for key, (dtype, dims, shard, offset, size, crc) in plain.items():
        entries.rows[key] = len(entries.heads)
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
    assert keys == sorted(expected)
    assert _split(values) == [expected[key] for key in keys]
