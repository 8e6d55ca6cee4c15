"""Bundles written and read back: random tensors, the reader API, laziness."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.helpers import assert_bit_equal
from tests.strategies import tensor_dicts
from trackpoint._format import naming
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import BundleWriter


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
        assert open(name(prefix), "rb").read() == open(name(again), "rb").read()


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
    items = sstable.read_table(open(naming.index_filename(prefix), "rb").read(), "i")
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


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 200), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5), st.integers(-(2**31), 2**31 - 1),
       st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 - 1))
def test_fast_entry_decoder_agrees_with_protobuf(dtype, dims, shard, offset, size, crc) -> None:
    from trackpoint._format._proto import tensor_bundle_pb2 as pb
    from trackpoint._format.bundle_reader import _decode_entry

    entry = pb.BundleEntryProto(dtype=dtype, shard_id=shard, offset=offset, size=size, crc32c=crc)
    entry.shape.SetInParent()
    for d in dims:
        entry.shape.dim.add().size = d
    fields = _decode_entry(entry.SerializeToString())
    assert fields == (dtype, tuple(dims), shard, offset, size, crc, ())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 200), st.lists(st.integers(0, 2**40), max_size=5), st.integers(0, 2**31 - 1),
       st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**32 - 1))
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
    options = tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(64),
                                   experimental_write_callbacks=[seen.append])
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

    directory = tmp_path_factory.mktemp("many")
    extra = {"strided": np.arange(12, dtype=np.float32)[::2], "big-endian": np.arange(3, dtype=">i4"),
             "empty1d": np.zeros(0, np.uint64), "empty2d": np.zeros((0, 3), np.float64), "scalar": np.float32(2)}
    items = list(tensors.items()) + list(extra.items())
    one, many = ShardWriter(str(directory / "one"), 0), ShardWriter(str(directory / "many"), 0)
    for key, value in items:
        one.add(key, value)
    many.add_many(items)
    one.close()
    many.close()
    assert one.entries == many.entries
    assert open(one.temp_path, "rb").read() == open(many.temp_path, "rb").read()
    with pytest.raises(tp.errors.InvalidArgumentError, match="duplicate"):
        many.add_many([items[0]])


@settings(max_examples=80, deadline=None)
@given(tensor_dicts, st.data(), st.integers(1, 400), st.integers(0, 64), st.integers(1, 300), st.integers(1, 1000),
       st.booleans())
def test_read_batches_matches_single_reads(tmp_path_factory, tensors: dict[str, object], data, batch_bytes: int,
                                           run_gap: int, run_bytes: int, parallel_bytes: int, ahead: bool) -> None:
    """Batches, runs and their splits (made tiny here), read ahead or not, give exactly what one
    read per key gives."""
    from trackpoint._format import bundle_reader

    prefix = str(tmp_path_factory.mktemp("batches") / "ckpt")
    sizes = data.draw(st.lists(st.integers(0, 40), min_size=1, max_size=20))
    tensors = {**tensors, **{f"n{i}": np.arange(n, dtype=np.float32) for i, n in enumerate(sizes)},
               **{f"u{i}": np.full((2, 3), i, np.int16) for i in range(data.draw(st.integers(0, 6)))}}  # alike
    tp.save_tensors(prefix, tensors)
    keys = data.draw(st.lists(st.sampled_from(sorted(tensors)), min_size=1, max_size=30))  # any order, repeats
    reader = BundleReader(prefix)
    reads: list[int] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        reads.append(length)
        return real_pread(fd, length, offset)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bundle_reader, "_RUN_GAP", run_gap)
        patch.setattr(bundle_reader, "_RUN_BYTES", run_bytes)
        patch.setattr(bundle_reader, "_PARALLEL_READ_BYTES", parallel_bytes)
        patch.setattr(bundle_reader, "_READ_AHEAD_ROWS", 0 if ahead else 1 << 60)
        patch.setattr(os, "pread", pread)
        batches = list(reader.read_batches(keys, batch_bytes))
    assert all(length <= max(run_bytes, parallel_bytes) for length in reads)  # runs stay bounded
    values = [value for batch in batches for value in batch]
    assert len(values) == len(keys)
    for key, value in zip(keys, values):
        assert_bit_equal(value, reader.read(key))
    sizes = [reader.entry(key).size for key in keys]
    start = 0
    half = max(1, batch_bytes // 2) if ahead else batch_bytes  # reading ahead, two batches are held at once
    for batch in batches:  # each as full as allowed: the next row would not have fitted
        batch_sizes = sizes[start : start + len(batch)]
        start += len(batch)
        assert len(batch) == 1 or sum(batch_sizes) <= half
        assert start == len(sizes) or sum(batch_sizes) + sizes[start] > half


@pytest.mark.parametrize("pick", [slice(None), slice(None, None, -1), slice(None, None, 2), slice(3, 4), slice(6, 12),
                                  slice(11, 5, -1)])
def test_read_many_alike_tensors(tmp_path, pick: slice) -> None:
    """Back-to-back tensors of one dtype and shape (read as rows of one array) come back right and read-only."""
    tensors = {f"u{i:02d}": np.full((2, 3), i, np.int16) for i in range(20)}
    tensors["u05"] = np.full((3, 2), 5, np.int16)  # same size, other shape: must not be taken as a row
    prefix = str(tmp_path / "ckpt")
    tp.save_tensors(prefix, tensors)
    keys = sorted(tensors)[pick]
    for key, value in zip(keys, BundleReader(prefix).read_many(keys)):
        assert_bit_equal(value, tensors[key])
        assert not value.flags.writeable


def _hundred_small_tensors(tmp_path, monkeypatch, read_ahead_rows: int | None = 5) -> tuple[str, list[str]]:
    """A hundred 1 KiB tensors. With ``read_ahead_rows`` 5 they are read ahead from batches of
    five (on its own, the reader reads ahead from batches of hundreds); None leaves the reader's own."""
    from trackpoint._format import bundle_reader

    if read_ahead_rows is not None:
        monkeypatch.setattr(bundle_reader, "_READ_AHEAD_ROWS", read_ahead_rows)
    prefix = str(tmp_path / "ckpt")
    tensors = {f"t{i:03d}": np.full(256, i, np.float32) for i in range(100)}  # 1 KiB each
    tp.save_tensors(prefix, tensors)
    return prefix, sorted(tensors)


def _record_reads(monkeypatch, delay_on_helper: float = 0.0) -> list[tuple[str, int]]:
    """``(thread name, length)`` of every ``os.pread``, as it happens; reads on the helper
    thread can be slowed down."""
    reads: list[tuple[str, int]] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        name = threading.current_thread().name
        if delay_on_helper and name == "trackpoint-read":
            time.sleep(delay_on_helper)
        reads.append((name, length))
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", pread)
    return reads


def test_the_next_batch_is_read_ahead_within_the_memory_bound(tmp_path, monkeypatch) -> None:
    """While the caller holds a batch, the next one's bytes are read on a helper thread; what is
    read and not yet consumed never passes ``batch_bytes``."""
    prefix, keys = _hundred_small_tensors(tmp_path, monkeypatch)
    reader = BundleReader(prefix)
    reads = _record_reads(monkeypatch)
    batch_bytes = 10 << 10  # ten tensors
    consumed = 0
    for batch in reader.read_batches(keys, batch_bytes):
        for value, key in zip(batch, keys[consumed:]):
            assert value[0] == int(key[1:])
        consumed += len(batch)
        if consumed < len(keys):  # the next batch is under way without being asked for
            deadline = 200
            while sum(length for _, length in reads) < (consumed + 1) * 1024 and deadline:
                time.sleep(0.01)
                deadline -= 1
        assert sum(length for _, length in reads) - (consumed - len(batch)) * 1024 <= batch_bytes
    assert consumed == len(keys)
    assert {name for name, _ in reads[1:]} == {"trackpoint-read"}  # all but the first read ahead


def test_a_caller_stopping_early_leaves_no_thread_reading(tmp_path, monkeypatch) -> None:
    prefix, keys = _hundred_small_tensors(tmp_path, monkeypatch)
    _record_reads(monkeypatch, delay_on_helper=0.2)
    batches = BundleReader(prefix).read_batches(keys, 10 << 10)
    next(batches)
    batches.close()
    assert not [t for t in threading.enumerate() if t.name == "trackpoint-read"]


def test_a_read_ahead_that_fails_raises_when_its_batch_is_reached(tmp_path, monkeypatch) -> None:
    """A data file shrinking under a read-ahead: the error names the key, at the batch it belongs to."""
    prefix, keys = _hundred_small_tensors(tmp_path, monkeypatch)
    reader = BundleReader(prefix)
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        return b"" if offset >= 50 << 10 else real_pread(fd, length, offset)  # the file ends at t050

    monkeypatch.setattr(os, "pread", pread)
    batches = reader.read_batches(keys, 10 << 10)
    got = [next(batches) for _ in range(10)]
    assert sum(map(len, got)) == 50
    with pytest.raises(tp.errors.DataLossError, match=r"unexpected end of file reading key 't050'"):
        next(batches)


def test_no_read_ahead_beside_a_batch_that_fills_the_bound(tmp_path, monkeypatch) -> None:
    """A batch of one tensor larger than half the bound is held alone: nothing is read ahead of it."""
    from trackpoint._format import bundle_reader

    monkeypatch.setattr(bundle_reader, "_PARALLEL_READ_BYTES", 4 << 10)  # the 8 KiB tensor is read on its own
    monkeypatch.setattr(bundle_reader, "_READ_AHEAD_ROWS", 1)
    prefix = str(tmp_path / "ckpt")
    tensors = {"a": np.arange(2048, dtype=np.float32), **{f"t{i:02d}": np.full(256, i, np.float32) for i in range(20)}}
    tp.save_tensors(prefix, tensors)
    fetched: list[int] = []
    real_fetch = bundle_reader._ReadPlan.fetch

    def fetch(plan: bundle_reader._ReadPlan, runs: list) -> list[bytes]:
        fetched.append(sum(run.length for run in runs))
        return real_fetch(plan, runs)

    monkeypatch.setattr(bundle_reader._ReadPlan, "fetch", fetch)
    batches = BundleReader(prefix).read_batches(sorted(tensors), 10 << 10)
    (big,) = next(batches)
    time.sleep(0.1)
    assert fetched == [0]  # 8 KiB held: the next 5 KiB would pass the 10 KiB bound
    del big
    values = [value for batch in batches for value in batch]
    assert [int(v[0]) for v in values] == list(range(20))
    assert fetched[1:] and sum(fetched) == 20 << 10


def test_batches_of_a_few_tensors_are_not_read_ahead(tmp_path, monkeypatch) -> None:
    """Ten tensors a batch: too little to overlap with, so every read is the caller's own."""
    prefix, keys = _hundred_small_tensors(tmp_path, monkeypatch, read_ahead_rows=None)
    reads = _record_reads(monkeypatch)
    batches = list(BundleReader(prefix).read_batches(keys, 10 << 10))
    assert [len(batch) for batch in batches] == [10] * 10
    assert {name for name, _ in reads} == {threading.current_thread().name}
