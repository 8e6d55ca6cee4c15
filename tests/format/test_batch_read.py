"""Batched reads (trackpoint._format.batch_read): the same values as single reads, in few reads, within the bound."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.format.bundle_helpers import read_many
from tests.helpers import assert_bit_equal
from tests.strategies import tensor_dicts
from trackpoint._format.batch_read import OverlappingLoader, ReadPlan, SerialLoader
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.crc import crc32c
from trackpoint._format.read_tuning import ReadTuning

ALWAYS_AHEAD = ReadTuning(read_ahead_rows=0)
NEVER_AHEAD = ReadTuning(read_ahead_rows=1 << 60)


@pytest.mark.slow  # a differential test over random bundles (hypothesis): seconds
@settings(max_examples=80, deadline=None)
@given(
    tensor_dicts,
    st.data(),
    st.integers(1, 400),
    st.integers(0, 64),
    st.integers(1, 300),
    st.integers(1, 1000),
    st.booleans(),
)
def test_read_batches_matches_single_reads(
    tmp_path_factory,
    tensors: dict[str, object],
    data,
    batch_bytes: int,
    run_gap: int,
    run_bytes: int,
    parallel_bytes: int,
    ahead: bool,
) -> None:
    """Batches, runs and their splits (made tiny here), read ahead or not, give exactly what one
    read per key gives."""
    prefix = str(tmp_path_factory.mktemp("batches") / "ckpt")
    sizes = data.draw(st.lists(st.integers(0, 40), min_size=1, max_size=20))
    tensors = {
        **tensors,
        **{f"n{i}": np.arange(n, dtype=np.float32) for i, n in enumerate(sizes)},
        **{f"u{i}": np.full((2, 3), i, np.int16) for i in range(data.draw(st.integers(0, 6)))},
    }  # alike
    tp.save_tensors(prefix, tensors)
    keys = data.draw(st.lists(st.sampled_from(sorted(tensors)), min_size=1, max_size=30))  # any order, repeats
    tuning = ReadTuning(
        run_gap=run_gap,
        run_bytes=run_bytes,
        parallel_read_bytes=parallel_bytes,
        read_ahead_rows=0 if ahead else 1 << 60,
    )
    reader = BundleReader(prefix, tuning=tuning)
    reads: list[int] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        reads.append(length)
        return real_pread(fd, length, offset)

    with pytest.MonkeyPatch.context() as patch:
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


@pytest.mark.parametrize(
    "pick", [slice(None), slice(None, None, -1), slice(None, None, 2), slice(3, 4), slice(6, 12), slice(11, 5, -1)]
)
def test_alike_tensors_come_back_right_and_read_only(tmp_path, pick: slice) -> None:
    """Back-to-back tensors of one dtype and shape (read as rows of one array) come back right and read-only."""
    tensors = {f"u{i:02d}": np.full((2, 3), i, np.int16) for i in range(20)}
    tensors["u05"] = np.full((3, 2), 5, np.int16)  # same size, other shape: must not be taken as a row
    prefix = str(tmp_path / "ckpt")
    tp.save_tensors(prefix, tensors)
    keys = sorted(tensors)[pick]
    for key, value in zip(keys, read_many(BundleReader(prefix), keys)):
        assert_bit_equal(value, tensors[key])
        assert not value.flags.writeable


def _hundred_small_tensors(tmp_path) -> tuple[str, list[str]]:
    """A hundred 1 KiB tensors."""
    prefix = str(tmp_path / "ckpt")
    tensors = {f"t{i:03d}": np.full(256, i, np.float32) for i in range(100)}
    tp.save_tensors(prefix, tensors)
    return prefix, sorted(tensors)


def _damage(prefix: str, key: str, at: int = 7) -> None:
    """Flip one byte of ``key``'s bytes in its data file (its checksum in the index kept)."""
    entry = BundleReader(prefix).entry(key)
    path = f"{prefix}.data-00000-of-00001"
    with open(path, "r+b") as f:
        f.seek(entry.offset + at)
        byte = f.read(1)[0]
        f.seek(entry.offset + at)
        f.write(bytes([byte ^ 0x10]))


def _alike_run(tmp_path) -> tuple[str, list[str]]:
    """1,500 tensors of 256 bytes, back to back: one run of alike tensors, over ``_ALIKE_RUN``."""
    prefix = str(tmp_path / "ckpt")
    tensors = {f"t{i:04d}": np.full(64, i, np.float32) for i in range(1500)}
    tp.save_tensors(prefix, tensors)
    return prefix, sorted(tensors)


def test_alike_tensors_in_a_run_are_verified_together_once_per_run(tmp_path, monkeypatch) -> None:
    """Back-to-back tensors of one size: one crc over the run's bytes, not one per tensor; fewer
    than ``_ALIKE_RUN`` of them, one each."""
    from trackpoint._format import batch_read

    calls: list[int] = []

    def counted(data, *args):
        calls.append(len(data))
        return crc32c(data, *args)

    monkeypatch.setattr(batch_read, "crc32c", counted)
    prefix, keys = _alike_run(tmp_path)
    values = read_many(BundleReader(prefix), keys)
    assert [float(v[0]) for v in values] == list(range(1500))
    assert calls == [1500 * 256], calls[:5]
    calls.clear()
    (tmp_path / "few").mkdir()
    few, few_keys = _hundred_small_tensors(tmp_path / "few")
    read_many(BundleReader(few), few_keys)
    assert calls == [1024] * 100, calls[:5]


@pytest.mark.parametrize("damaged", [["t0000"], ["t0742"], ["t1499"], ["t0042", "t0777"]])
def test_a_damaged_tensor_in_a_run_verified_together_is_named(tmp_path, damaged: list[str]) -> None:
    """The run's crc fails; each tensor is then checked, and the first damaged one is named."""
    prefix, keys = _alike_run(tmp_path)
    for key in damaged:
        _damage(prefix, key)
    with pytest.raises(tp.errors.DataLossError, match=f"checksum mismatch for key '{damaged[0]}'"):
        read_many(BundleReader(prefix), keys)


class _Recorder:
    """A ``spawn`` for :meth:`ReadPlan.loader` that runs each read ahead at once, on this thread, and
    logs it: deterministic, so tests see when each read started without threads or sleeps."""

    def __init__(self, log: list[tuple[str, int]]) -> None:
        self.log = log
        self.joined = 0

    def __call__(self, function: Callable[[], list[bytes]]) -> _Recorder.Done:
        fetched = function()
        self.log.append(("ahead", sum(map(len, fetched))))
        return _Recorder.Done(self, fetched)

    class Done:
        def __init__(self, recorder: _Recorder, fetched: list[bytes]) -> None:
            self.recorder, self.fetched = recorder, fetched

        def result(self) -> list[bytes]:
            return self.fetched

        def join(self) -> None:
            self.recorder.joined += 1


def test_many_tensors_a_batch_are_read_ahead_and_a_few_are_not(tmp_path) -> None:
    prefix, keys = _hundred_small_tensors(tmp_path)
    reader = BundleReader(prefix)
    assert isinstance(ReadPlan(reader, keys).loader(10 << 10), SerialLoader)  # ten tensors a batch: little to overlap
    assert isinstance(ReadPlan(reader, keys).loader(1 << 20), SerialLoader)  # one batch: nothing to overlap
    assert isinstance(
        ReadPlan(BundleReader(prefix, tuning=ReadTuning(read_ahead_rows=5)), keys).loader(10 << 10), OverlappingLoader
    )
    many = {f"t{i:04d}": np.full(4, i, np.float32) for i in range(2048)}
    tp.save_tensors(prefix, many)
    loader = ReadPlan(BundleReader(prefix), sorted(many)).loader(4 << 10)  # 256 tensors a batch
    assert isinstance(loader, OverlappingLoader) and len(loader.batches) == 16  # half the bound each, two fit


def test_the_next_batch_is_read_ahead_within_the_memory_bound(tmp_path) -> None:
    """While the caller holds a batch, the next one's bytes are read ahead; what is read and not
    yet consumed never passes ``batch_bytes``."""
    prefix, keys = _hundred_small_tensors(tmp_path)
    plan = ReadPlan(BundleReader(prefix, tuning=ReadTuning(read_ahead_rows=5)), keys)
    log: list[tuple[str, int]] = []
    batch_bytes = 10 << 10
    loader = plan.loader(batch_bytes, _Recorder(log))
    assert isinstance(loader, OverlappingLoader)
    consumed = 0
    for batch in plan.values(loader):
        assert [int(value[0]) for value in batch] == list(range(consumed, consumed + len(batch)))
        consumed += len(batch)
        log.append(("got", len(batch) * 1024))
    assert consumed == len(keys)
    assert log[0] == ("ahead", 5 << 10)  # the second batch was read before the first was handed out
    outstanding = 5 << 10  # read and not yet consumed: the first batch, which the caller read itself
    for event, size in log:
        outstanding += size if event == "ahead" else -size
        assert outstanding <= batch_bytes
    assert [event for event, _ in log].count("ahead") == len(loader.batches) - 1  # all but the first


def test_a_caller_stopping_early_leaves_no_read_under_way(tmp_path) -> None:
    prefix, keys = _hundred_small_tensors(tmp_path)
    plan = ReadPlan(BundleReader(prefix, tuning=ReadTuning(read_ahead_rows=5)), keys)
    recorder = _Recorder([])
    batches = plan.values(plan.loader(10 << 10, recorder))
    next(batches)
    assert recorder.joined == 0
    batches.close()
    assert recorder.joined == 1  # the read ahead of the second batch was waited for


def test_a_read_ahead_that_fails_raises_when_its_batch_is_reached(tmp_path, monkeypatch) -> None:
    """A data file shrinking under a read-ahead: the error names the key, at the batch it belongs to."""
    prefix, keys = _hundred_small_tensors(tmp_path)
    reader = BundleReader(prefix, tuning=ReadTuning(read_ahead_rows=5))
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        return b"" if offset >= 50 << 10 else real_pread(fd, length, offset)  # the file ends at t050

    monkeypatch.setattr(os, "pread", pread)
    batches = reader.read_batches(keys, 10 << 10)
    got = [next(batches) for _ in range(10)]
    assert sum(map(len, got)) == 50
    with pytest.raises(tp.errors.DataLossError, match=r"unexpected end of file reading key 't050'"):
        next(batches)


def test_no_read_ahead_beside_a_batch_that_fills_the_bound(tmp_path) -> None:
    """A batch of one tensor larger than half the bound is held alone: nothing is read ahead of it."""
    prefix = str(tmp_path / "ckpt")
    tensors = {"a": np.arange(2048, dtype=np.float32), **{f"t{i:02d}": np.full(256, i, np.float32) for i in range(20)}}
    tp.save_tensors(prefix, tensors)
    # the 8 KiB tensor is read on its own; read ahead whatever the batch sizes
    plan = ReadPlan(
        BundleReader(prefix, tuning=ReadTuning(parallel_read_bytes=4 << 10, read_ahead_rows=1)), sorted(tensors)
    )
    log: list[tuple[str, int]] = []
    batches = plan.values(plan.loader(10 << 10, _Recorder(log)))
    (big,) = next(batches)
    assert log == []  # 8 KiB held: the next 5 KiB would pass the 10 KiB bound
    values = [value for batch in batches for value in batch]
    assert [int(v[0]) for v in values] == list(range(20))
    assert [size for _, size in log] == [5 << 10] * 3  # each small batch but the first was read ahead
    assert_bit_equal(big, tensors["a"])


@pytest.mark.parametrize("tuning", [ALWAYS_AHEAD, NEVER_AHEAD], ids=["overlapping", "serial"])
def test_both_loaders_read_what_single_reads_read(tmp_path, tuning: ReadTuning) -> None:
    """On real helper threads too: the values equal one read per key."""
    prefix, keys = _hundred_small_tensors(tmp_path)
    reader = BundleReader(prefix, tuning=tuning)
    plan = ReadPlan(reader, keys)
    loader = plan.loader(10 << 10)
    assert isinstance(loader, OverlappingLoader if tuning is ALWAYS_AHEAD else SerialLoader)
    values = [value for batch in plan.values(loader) for value in batch]
    for key, value in zip(keys, values, strict=True):
        assert_bit_equal(value, reader.read(key))
