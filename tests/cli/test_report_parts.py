"""``trackpoint report`` reads a large tensor in parts on two threads and many small ones in
batches: whichever way the values come, the statistics are those of one pass over them.

Checked against :class:`TensorStats` given the whole tensor at once (and it against numpy in
``test_report.py``), and, through ``report``, that a damaged byte in any part is found.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import trackpoint as tp
from trackpoint.tools import report as report_module
from trackpoint.tools._report_batch import batch_changes, batch_stats
from trackpoint.tools._report_stats import HISTOGRAM_SAMPLE, ChangeStats, TensorStats, sample_step
from trackpoint.tools.report import report

EXACT = ("elements", "zeros", "nan", "inf", "min", "max", "binned", "hist")


def _whole(value: np.ndarray, size: int | None = None) -> dict:
    stats = TensorStats(value.size if size is None else size)
    stats.add(value.reshape(-1))
    return stats.result()


def _same(got: dict, expected: dict) -> None:
    for name in ("zeros", "nan", "inf", "min", "max", "binned", "hist"):
        assert got[name] == expected[name], name
    for name in ("mean", "std"):
        if expected[name] is None:
            assert got[name] is None
        else:
            scale = max(abs(expected["min"]), abs(expected["max"]), 1e-30)
            assert got[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-6 * scale), name


values_32 = hnp.arrays(
    np.float32,
    st.integers(1, 3000),
    elements=st.one_of(
        st.floats(-1e6, 1e6, width=32),
        st.sampled_from([0.0, -0.0, np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-40]),
    ),
)


@settings(max_examples=80, deadline=None)
@given(values_32, st.lists(st.floats(0, 1), max_size=3), st.integers(1, 700))
def test_parts_and_chunks_merge_to_one_pass(values: np.ndarray, cuts: list[float], chunk: int) -> None:
    """The histogram's grid depends on all the values, not on where the parts and chunks begin:
    it comes out identical; counts, extremes and NaN/Inf are exact; moments agree to rounding."""
    bounds = sorted({0, values.size, *(int(c * values.size) for c in cuts)})
    parts = []
    for start, stop in itertools.pairwise(bounds):
        part = TensorStats(values.size, start=start)
        for first in range(start, stop, chunk):
            part.add(values[first : min(first + chunk, stop)])
        parts.append(part)
    merged = parts[0]
    for part in parts[1:]:
        merged.merge(part)
    assert merged.elements == values.size
    _same(merged.result(), _whole(values))


def test_a_sampled_histogram_is_the_same_in_parts() -> None:
    """Past ALL_BINNED elements every k-th is binned (sample_step), counted from the tensor's start in every part."""
    values = np.random.default_rng(1).standard_normal(3 * HISTOGRAM_SAMPLE + 5).astype(np.float32)
    parts = [TensorStats(values.size, start=s) for s in (0, 100_003)]
    parts[0].add(values[:100_003])
    for first in range(100_003, values.size, 65_536):
        parts[1].add(values[first : first + 65_536])
    parts[0].merge(parts[1])
    expected = _whole(values)
    step = sample_step(values.size)
    assert step > 1 and expected["binned"] == -(-values.size // step)
    _same(parts[0].result(), expected)


dtypes = st.sampled_from(
    [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.int8, np.uint8, np.bool_]
)


@st.composite
def tensors(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(dtypes))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))
    if dtype.kind == "f" or dtype == ml_dtypes.bfloat16:
        elements = st.one_of(st.floats(-1e3, 1e3, width=16), st.sampled_from([0.0, np.nan, np.inf, -np.inf]))
        return np.array(draw(hnp.arrays(np.float32, shape, elements=elements))).astype(dtype)
    return draw(hnp.arrays(dtype, shape))


@settings(max_examples=60, deadline=None)
@given(st.lists(tensors(), min_size=1, max_size=12))
def test_a_batch_has_each_tensor_s_statistics(values: list[np.ndarray]) -> None:
    """Any dtype, empty and 0-d tensors, NaN and Inf included."""
    for got, value in zip(batch_stats(values), values):
        _same(got, _whole(value))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=8), st.integers(0, 2**32 - 1))
def test_a_batch_has_each_pair_s_change(sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    old = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    new = [a + (rng.standard_normal(a.size).astype(np.float32) if rng.random() < 0.7 else 0) for a in old]
    for got, a, b in zip(batch_changes(old, new), old, new):
        change = ChangeStats()
        change.add(a, b)
        for name, value in change.result().items():
            assert got[name] == (pytest.approx(value, rel=1e-5, abs=1e-7) if value is not None else None), name
        assert got["diff_sq"] == pytest.approx(change.diff_sq, rel=1e-5, abs=1e-9)


def test_report_reads_large_tensors_in_parts_and_small_in_batches(tmp_path: Path, monkeypatch) -> None:
    """End to end: report's numbers are one pass's, and both paths are taken (counted)."""
    rng = np.random.default_rng(2)
    big = rng.standard_normal(3_000_001).astype(np.float32) * 3 + 7
    big[:1000] = 0
    small = {f"s{i}": rng.standard_normal((i + 1, 3)).astype(np.float16) for i in range(50)}
    path = tp.save_tensors(str(tmp_path / "a"), {"big": big} | small)
    changed = {"big": big * np.float32(1.001)} | {k: v + np.float16(1) for k, v in small.items()}
    other = tp.save_tensors(str(tmp_path / "b"), changed)
    calls = {"pass": 0, "batch": 0}
    pass_over, batches = report_module._pass_over, report_module._batches

    def counted_pass(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["pass"] += 1
        return pass_over(*args, **kwargs)

    def counted_batches(*args, **kwargs):  # type: ignore[no-untyped-def]
        for batch in batches(*args, **kwargs):
            calls["batch"] += 1
            yield batch

    monkeypatch.setattr(report_module, "_pass_over", counted_pass)
    monkeypatch.setattr(report_module, "_batches", counted_batches)
    data = report(path, other)
    assert calls == {"pass": 1, "batch": 1}
    _same(data["tensors"]["big"], _whole(changed["big"]))
    for key, value in changed.items():
        _same(data["tensors"][key], _whole(value))
    by_key = {c["key"]: c for c in data["diff"]["changed"]}
    for key, value in changed.items():
        change = ChangeStats()
        change.add(
            np.asarray(({"big": big} | small)[key], np.float64).reshape(-1), value.astype(np.float64).reshape(-1)
        )
        assert by_key[key]["rel_l2"] == pytest.approx(change.result()["rel_l2"], rel=1e-4)


@pytest.mark.parametrize("where", [0.1, 0.9])
def test_a_damaged_byte_in_either_part_fails_the_report(tmp_path: Path, where: float) -> None:
    values = np.random.default_rng(3).standard_normal(3_000_000).astype(np.float32)
    path = tp.save_tensors(str(tmp_path / "ckpt"), {"w": values})
    data = Path(path + ".data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    raw[int(len(raw) * where)] ^= 0x01
    data.write_bytes(bytes(raw))
    with pytest.raises(tp.errors.DataLossError, match="'w'"):
        report(path)


@pytest.mark.parametrize("size", [100, 10_000, 3_000_000])  # batched, whole, in parts
def test_a_big_endian_checkpoint_is_reported_in_native_values(tmp_path: Path, size: int) -> None:
    """A bundle whose header says BIG (as a big-endian machine's TensorFlow writes): every read path
    byte-swaps before the statistics."""
    from tests.format.bundle_helpers import read_table
    from trackpoint._format import sstable
    from trackpoint._format._proto import tensor_bundle_pb2 as pb
    from trackpoint._format.crc import crc32c, mask
    from trackpoint._storage import naming

    values = np.random.default_rng(4).standard_normal(size).astype(np.float32) + 2
    prefix = tp.save_tensors(str(tmp_path / "be"), {"x": values})
    data = values.astype(">f4").tobytes()
    Path(naming.data_filename(prefix, 0, 1)).write_bytes(data)
    items = read_table(Path(naming.index_filename(prefix)).read_bytes(), "i")
    header, entry = pb.BundleHeaderProto(), pb.BundleEntryProto()
    header.ParseFromString(items[0][1])
    entry.ParseFromString(items[1][1])
    header.endianness = pb.BundleHeaderProto.BIG
    entry.crc32c = mask(crc32c(data))
    table = sstable.build_table([(b"", header.SerializeToString()), (b"x", entry.SerializeToString())])
    Path(naming.index_filename(prefix)).write_bytes(table)
    _same(report(prefix)["tensors"]["x"], _whole(values))


def test_a_sampled_histogram_spans_the_extremes_it_did_not_sample() -> None:
    values = np.zeros(1 << 20, np.float32)
    values[1] = 1000.0  # the step is 16: element 1 is not binned
    stats = TensorStats(values.size)
    stats.add(values)
    result = stats.result()
    assert result["binned"] == values.size // sample_step(values.size) and result["max"] == 1000.0
    hist = result["hist"]
    assert (
        hist["lo"] <= 0.0 and hist["hi"] > 1000.0 and hist["counts"][-1] == 0 and hist["counts"][0] == result["binned"]
    )


@pytest.mark.parametrize(("offset", "spread"), [(1000.1, 1e-3), (1e4, 0.5), (0.1, 0.0)])
def test_a_mean_far_from_zero_keeps_its_spread(offset: float, spread: float) -> None:
    """Where the sum of squares would cancel, the chunk is summed again about its mean: the mean is
    right to a millionth of the spread and the spread to 1e-5, streamed or batched."""
    values = (offset + np.random.default_rng(5).standard_normal(100_000) * spread).astype(np.float32)
    exact = values.astype(np.float64)
    stats = TensorStats(values.size)
    for first in range(0, values.size, 7_000):
        stats.add(values[first : first + 7_000])
    for got, expected in ((stats.result(), exact), (batch_stats([values[:4_000]])[0], exact[:4_000])):
        assert abs(got["mean"] - expected.mean()) <= 1e-6 * max(expected.std(), 1e-30) + 1e-12 * offset
        assert got["std"] == pytest.approx(expected.std(), rel=1e-5, abs=1e-30)


def test_the_sample_skips_nan_where_it_falls_whatever_the_chunks() -> None:
    """Every step-th element of the tensor, those that are finite: not every step-th finite one."""
    values = np.random.default_rng(6).standard_normal(100_000).astype(np.float32)
    values[::7] = np.nan
    step = sample_step(values.size)
    chunked = TensorStats(values.size)
    for first in range(0, values.size, 1_000):
        chunked.add(values[first : first + 1_000])
    expected = _whole(values)
    assert expected["binned"] == int(np.isfinite(values[::step]).sum())
    _same(chunked.result(), expected)


def test_bfloat16_and_float16_tensors_have_statistics(tmp_path: Path) -> None:
    values = {"b": np.linspace(-1, 1, 10).astype(ml_dtypes.bfloat16), "h": np.arange(10, dtype=np.float16)}
    for path in (tp.save_tensors(str(tmp_path / "tf"), values), str(tmp_path / "st.safetensors")):
        if path.endswith(".safetensors"):
            tp.convert(str(tmp_path / "tf"), path)
        data = report(path)
        for key, value in values.items():
            name = next(k for k in data["tensors"] if k == key or k.startswith(f"{key}/") or k.endswith(key))
            _same(data["tensors"][name], _whole(value))


def test_a_sliced_tensor_is_summarised_like_a_whole_one(tmp_path: Path) -> None:
    """Saved in slices over three shards: read whole (slices put together), handed out in chunks."""
    values = np.random.default_rng(7).standard_normal((1_000, 700)).astype(np.float32)
    policy = tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(1 << 20))
    path = tp.save_tensors(str(tmp_path / "ckpt"), {"w": values}, policy)
    assert len(list(tmp_path.glob("ckpt.data-*"))) > 1
    _same(report(path)["tensors"]["w"], _whole(values))
