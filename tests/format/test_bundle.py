"""Bundles written and read back: random tensors, the reader API, laziness."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.format.bundle_helpers import read_table
from tests.helpers import assert_bit_equal
from tests.strategies import tensor_dicts
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import BundleWriter
from trackpoint._storage import naming


@pytest.mark.slow  # 80 random bundles written and read: seconds
@settings(max_examples=80, deadline=None)
@given(tensor_dicts)
def test_round_trip_random_tensors(tmp_path_factory, tensors: dict[str, object]) -> None:
    prefix = str(tmp_path_factory.mktemp("rt") / "ckpt")
    tp.save_tensors(prefix, tensors)
    reader = tp.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map() == {k: list(np.shape(v)) for k, v in tensors.items()}
    for key, value in tensors.items():
        got = reader.get_tensor(key)
        assert_bit_equal(got, value if isinstance(value, bytes) or np.ndim(value) else np.asarray(value)[()])
    # deterministic: the same tensors give the same bytes
    again = str(tmp_path_factory.mktemp("rt") / "ckpt")
    tp.save_tensors(again, tensors)
    for name in (naming.index_filename, lambda p: naming.data_filename(p, 0, 1)):
        assert pathlib.Path(name(prefix)).read_bytes() == pathlib.Path(name(again)).read_bytes()


def test_reader_api(tmp_path) -> None:
    prefix = str(tmp_path / "ckpt")
    tp.save_tensors(prefix, {"b": np.arange(6, dtype=np.int32).reshape(2, 3), "a": np.float32(1.5), "s": b"x"})
    reader = tp.load_checkpoint(prefix)
    assert reader.has_tensor("a") and not reader.has_tensor("a:0")
    assert reader.get_variable_to_dtype_map() == {"a": np.float32, "b": np.int32, "s": np.dtype(object)}
    assert reader.debug_string() == b"a (DT_FLOAT) []\nb (DT_INT32) [2,3]\ns (DT_STRING) []\n"
    assert tp.list_variables(prefix) == [("a", []), ("b", [2, 3]), ("s", [])]
    assert tp.load_variable(prefix, "a:0") == np.float32(1.5)
    with pytest.raises(tp.errors.NotFoundError, match="Key nope not found in checkpoint"):
        reader.get_tensor("nope")


def test_duplicate_and_unsupported_keys(tmp_path) -> None:
    writer = BundleWriter(str(tmp_path / "c"))
    writer.add("x", np.zeros(1))
    with pytest.raises(tp.errors.InvalidArgumentError, match="duplicate key"):
        writer.add("x", np.zeros(1))
    with pytest.raises(tp.errors.InvalidArgumentError, match="no TensorFlow checkpoint equivalent"):
        writer.add("y", np.zeros(1, dtype="datetime64[s]"))


def test_slices_written_and_read(tmp_path) -> None:
    full = np.arange(20, dtype=np.float64).reshape(4, 5)
    prefix = str(tmp_path / "c")
    writer = BundleWriter(prefix, num_shards=2)
    writer.add_slice("w", (4, 5), ((0, 1), (0, -1)), full[:1], shard_id=0)
    writer.add_slice("w", (4, 5), ((1, 3), (0, 2)), full[1:, :2], shard_id=1)
    writer.add_slice("w", (4, 5), ((1, 3), (2, 3)), full[1:, 2:], shard_id=0)
    writer.add_slice("whole", (2,), ((0, 2),), np.array([1, 2]), shard_id=1)  # full cover: a plain entry
    with pytest.raises(tp.errors.InvalidArgumentError, match="slice data of shape"):
        writer.add_slice("w", (4, 5), ((0, 1), (0, -1)), full[:2])
    with pytest.raises(tp.errors.InvalidArgumentError, match="conflicts"):
        writer.add_slice("w", (4, 6), ((0, 1), (0, -1)), np.zeros((1, 6)))
    writer.finish()
    reader = tp.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map() == {"w": [4, 5], "whole": [2]}
    assert_bit_equal(reader.get_tensor("w"), full)
    assert not BundleReader(prefix).entry("whole").is_sliced


def test_open_reads_only_the_index_and_get_tensor_reads_one_tensor(tmp_path, monkeypatch) -> None:
    prefix = str(tmp_path / "c")
    tp.save_tensors(prefix, {"a": np.zeros(1000, np.float32), "b": np.ones(10, np.float32)})
    calls: list[tuple[int, int]] = []
    real = os.preadv

    def spy(fd: int, buffers: list, offset: int) -> int:
        calls.append((offset, sum(memoryview(b).nbytes for b in buffers)))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", spy)
    reader = tp.load_checkpoint(prefix)
    reader.get_variable_to_shape_map()
    assert calls == []
    reader.get_tensor("b")
    assert calls == [(4000, 40)]


def test_directory_without_state_file(tmp_path) -> None:
    with pytest.raises(tp.errors.NotFoundError, match="Couldn't find 'checkpoint' file"):
        tp.load_checkpoint(str(tmp_path))


def test_big_endian_bundle_is_byte_swapped(tmp_path) -> None:
    """A bundle whose header says BIG: numeric tensors come back in native order."""
    from trackpoint._format import sstable
    from trackpoint._format._proto import tensor_bundle_pb2 as pb

    prefix = str(tmp_path / "be")
    values = np.array([1.5, -2.0, 3.25], dtype=">f4")
    tp.save_tensors(prefix, {"x": values.astype("<f4")})
    data = values.tobytes()
    with open(naming.data_filename(prefix, 0, 1), "wb") as f:
        f.write(data)
    items = read_table(pathlib.Path(naming.index_filename(prefix)).read_bytes(), "i")
    header = pb.BundleHeaderProto()
    header.ParseFromString(items[0][1])
    header.endianness = pb.BundleHeaderProto.BIG
    entry = pb.BundleEntryProto()
    entry.ParseFromString(items[1][1])
    from trackpoint._format.crc import crc32c, mask

    entry.crc32c = mask(crc32c(data))
    with open(naming.index_filename(prefix), "wb") as f:
        f.write(sstable.build_table([(b"", header.SerializeToString()), (b"x", entry.SerializeToString())]))
    got = tp.load_variable(prefix, "x")
    assert got.dtype == np.float32 and got.tolist() == [1.5, -2.0, 3.25]


@pytest.mark.slow  # a differential test against protobuf (hypothesis): about a second
@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 200),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**32 - 1),
)
def test_both_entry_decoders_agree_with_protobuf(dtype, dims, shard, offset, size, crc) -> None:
    """The bulk decoder (numpy columns) and the single one (protobuf) give the same Entry."""
    from tests.format.bundle_helpers import decode_entries
    from trackpoint._format._proto import tensor_bundle_pb2 as pb
    from trackpoint._format.entries import Entry, entries_from_columns, parse_entry

    entry = pb.BundleEntryProto(dtype=dtype, shard_id=shard, offset=offset, size=size, crc32c=crc)
    entry.shape.SetInParent()
    for d in dims:
        entry.shape.dim.add().size = d
    value = entry.SerializeToString()
    single = parse_entry("k", value, "index")
    assert single == Entry("k", dtype, tuple(dims), shard, offset, size, crc, (), single.dtype)
    (bulk,) = entries_from_columns(["k"], decode_entries([value]))
    assert bulk == single


def _entries(writer) -> dict[bytes, bytes]:
    """A shard writer's entries, serialized, by key."""
    keys, values = writer.entries.sorted_columns()
    return {keys.row(i): values.row(i) for i in range(len(keys))}


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 200),
    st.lists(st.integers(0, 2**40), max_size=5),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(0, 2**32 - 1),
)
def test_entry_encoder_matches_protobuf(dtype, dims, shard, offset, size, crc) -> None:
    from trackpoint._format._proto import tensor_bundle_pb2 as pb
    from trackpoint._format.bundle_writer import encode_entry

    entry = pb.BundleEntryProto(dtype=dtype, shard_id=shard, offset=offset, size=size, crc32c=crc)
    entry.shape.SetInParent()
    for d in dims:
        entry.shape.dim.add().size = d
    assert encode_entry(dtype, dims, shard, offset, size, crc) == entry.SerializeToString()


def test_save_tensors_with_options(tmp_path) -> None:
    seen = []
    prefix = str(tmp_path / "c")
    options = tp.CheckpointOptions(
        experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(64), experimental_write_callbacks=[seen.append]
    )
    tp.save_tensors(prefix, {"a": np.arange(40, dtype=np.float32), "b": np.zeros(3)}, options)
    assert seen == [prefix]
    assert len([f for f in os.listdir(tmp_path) if ".data-" in f]) > 2
    assert tp.load_variable(prefix, "a").tolist() == list(range(40))
    with pytest.raises(tp.errors.InvalidArgumentError, match="synchronously"):
        tp.save_tensors(prefix, {"a": np.zeros(1)}, tp.CheckpointOptions(enable_async=True))


@settings(max_examples=60, deadline=None)
@given(tensor_dicts)
def test_add_many_writes_what_add_writes(tmp_path_factory, tensors: dict[str, object]) -> None:
    """The batched fast path is byte for byte the per-tensor path, whatever the tensors."""
    from trackpoint._format.bundle_writer import ShardWriter
    from trackpoint._format.index_write import merge_shards, write_index

    directory = tmp_path_factory.mktemp("many")
    extra = {
        "strided": np.arange(12, dtype=np.float32)[::2],
        "big-endian": np.arange(3, dtype=">i4"),
        "empty1d": np.zeros(0, np.uint64),
        "empty2d": np.zeros((0, 3), np.float64),
        "scalar": np.float32(2),
    }
    items = list(tensors.items()) + list(extra.items())
    one, many = ShardWriter(str(directory / "one"), 0), ShardWriter(str(directory / "many"), 0)
    for key, value in items:
        one.add(key, value)
    many.add_many(items)
    one.close()
    many.close()
    assert _entries(one) == _entries(many)
    assert pathlib.Path(one.temp_path).read_bytes() == pathlib.Path(many.temp_path).read_bytes()
    duplicated = ShardWriter(str(directory / "duplicated"), 0)
    with pytest.raises(tp.errors.InvalidArgumentError, match="duplicate key"):  # when added, or when indexed
        duplicated.add_many([*items, items[0]])
        duplicated.close()
        write_index(str(directory / "duplicated"), merge_shards([duplicated]), 1)
    duplicated.abort()
    assert not os.path.exists(str(directory / "duplicated.index"))


def test_writeback_starts_while_writing(tmp_path) -> None:
    """Each 8 MiB written is handed to the disk at once, not left for the final fsync;
    the bytes are the same either way."""
    from trackpoint._format.bundle_writer import ShardWriter
    from trackpoint._storage import writeback

    tensors = [(f"t{i}", np.full(1 << 20, i, np.float32)) for i in range(5)]  # 4 MiB each
    small = [(f"s{i}", np.full(256, i, np.float32)) for i in range(9000)]  # 9 MiB of 1 KiB
    writer = ShardWriter(str(tmp_path / "d"), 0)
    writer.add_many(tensors[:2])
    assert writer._written_back == 8 << 20
    writer.add_many(tensors[2:] + small)
    assert writer._written_back >= writeback.WRITEBACK_BYTES * 3
    writer.close()
    data = pathlib.Path(writer.temp_path).read_bytes()
    assert data == b"".join(a.tobytes() for _, a in tensors + small)


def test_a_bundle_may_hold_some_slices_of_a_tensor_but_never_two_that_overlap(tmp_path) -> None:
    """One worker's part of a partitioned variable holds some of its slices (TF merges the parts
    later); slices that overlap are refused before the index exists."""
    from trackpoint._format.bundle_writer import BundleWriter

    partial = BundleWriter(str(tmp_path / "part"))
    partial.add_slice("w", (6, 4), ((0, 2), (0, 4)), np.ones((2, 4), np.float32))
    partial.finish()
    assert tp.list_variables(str(tmp_path / "part")) == [("w", [6, 4])]

    overlapping = BundleWriter(str(tmp_path / "bad"))
    overlapping.add_slice("w", (6, 4), ((0, 3), (0, 4)), np.ones((3, 4), np.float32))
    overlapping.add_slice("w", (6, 4), ((2, 2), (0, 4)), np.ones((2, 4), np.float32))
    with pytest.raises(tp.errors.InvalidArgumentError, match="'w'.*overlap") as caught:
        overlapping.finish()
    assert caught.value.key == "w"
    assert not (tmp_path / "bad.index").exists()
