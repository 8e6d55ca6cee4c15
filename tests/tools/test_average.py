"""``tp.average``: float64 means of float tensors, the rest from the last checkpoint, layouts checked."""

from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import traced_peak
from trackpoint import cli
from trackpoint.tools import average as average_module

DTYPES = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.complex64]


def _three(tmp_path: pathlib.Path) -> tuple[list[str], list[dict[str, object]]]:
    rng = np.random.default_rng(0)
    values = [
        {
            **{f"f{i}": rng.normal(size=(3, 5)).astype(dtype) for i, dtype in enumerate(DTYPES)},
            "step": np.int64(10 * (n + 1)),
            "flags": np.array([n % 2 == 0, True]),
            "name": f"run-{n}".encode(),
            "empty": np.zeros((0, 4), np.float32),
        }
        for n in range(3)
    ]
    paths = [tp.save_tensors(str(tmp_path / f"c{n}"), v) for n, v in enumerate(values)]
    return paths, values


def _expected(values: list[dict[str, object]], key: str, weights: list[float]) -> np.ndarray:
    dtype = np.asarray(values[0][key]).dtype
    wide = np.complex128 if dtype.kind == "c" else np.float64
    total = sum(np.asarray(v[key]).astype(wide) * w for v, w in zip(values, weights))
    return np.asarray(total).astype(dtype)


@pytest.mark.parametrize(
    ("weights", "factors"),
    [
        (None, [1 / 3] * 3),
        ("uniform", [1 / 3] * 3),
        (("exponential", 0.9), [0.81, 0.09, 0.1]),
        (["exponential", 0.9], [0.81, 0.09, 0.1]),
        ([1, 1, 2], [0.25, 0.25, 0.5]),
        (np.array([2.0, 0.0, 2.0]), [0.5, 0.0, 0.5]),
    ],
)
def test_floats_are_averaged_in_float64_and_the_rest_comes_from_the_last(tmp_path, weights, factors) -> None:
    paths, values = _three(tmp_path)
    np.testing.assert_allclose(average_module.weights_for(3, weights), factors, rtol=1e-12)
    factors = average_module.weights_for(3, weights)  # the exact float64 weights, to compare bytes
    out = tp.average(paths, str(tmp_path / "mean"), weights)
    reader = tp.load_checkpoint(out)
    for i, dtype in enumerate(DTYPES):
        got = reader.get_tensor(f"f{i}")
        assert got.dtype == np.dtype(dtype)
        assert got.tobytes() == _expected(values, f"f{i}", factors).tobytes(), dtype
    assert reader.get_tensor("step") == 30
    np.testing.assert_array_equal(reader.get_tensor("flags"), [True, True])
    assert reader.get_tensor("name") == b"run-2"
    assert reader.get_tensor("empty").shape == (0, 4)
    assert tp.verify_checkpoint(out) == []


def test_the_accumulator_is_filled_chunk_by_chunk(tmp_path, monkeypatch) -> None:
    """Chunks of 7 elements over tensors of 15 and 1,000: every boundary lands somewhere new."""
    monkeypatch.setattr(average_module, "_CHUNK_ELEMENTS", 7)
    rng = np.random.default_rng(1)
    values = [{"a": rng.normal(size=1000).astype(np.float32), "b": rng.normal(size=(3, 5))} for _ in range(2)]
    paths = [tp.save_tensors(str(tmp_path / f"c{n}"), v) for n, v in enumerate(values)]
    reader = tp.load_checkpoint(tp.average(paths, str(tmp_path / "mean")))
    for key in ("a", "b"):
        assert reader.get_tensor(key).tobytes() == _expected(values, key, [0.5, 0.5]).tobytes()


def test_sliced_tensors_are_averaged_whole(tmp_path) -> None:
    rng = np.random.default_rng(2)
    policy = tp.sharding.MaxShardSizePolicy(max_shard_size=64)
    options = tp.CheckpointOptions(experimental_sharding_callback=policy)
    values = [{"big": rng.normal(size=(10, 4)).astype(np.float32), "b": np.ones(2)} for _ in range(2)]
    paths = [tp.save_tensors(str(tmp_path / f"c{n}"), v, options) for n, v in enumerate(values)]
    assert len(tp.load_checkpoint(paths[0])._bundle.entry("big").slices) > 1  # the policy did slice it
    reader = tp.load_checkpoint(tp.average(paths, str(tmp_path / "mean")))
    assert reader.get_tensor("big").tobytes() == _expected(values, "big", [0.5, 0.5]).tobytes()


def test_an_averaged_training_checkpoint_keeps_its_graph(tmp_path) -> None:
    paths = []
    for n in range(3):
        module = tp.Module()
        module.w = tp.Variable(np.full(3, float(n), np.float32))
        checkpoint = tp.Checkpoint(model=module)
        checkpoint.save_counter.assign(n + 1)
        paths.append(checkpoint.write(str(tmp_path / "run" / f"ckpt-{n + 1}")))
    out = tp.average(paths, str(tmp_path / "avg"))
    module = tp.Module()
    module.w = tp.Variable(np.zeros(3, np.float32))
    checkpoint = tp.Checkpoint(model=module)
    _ = checkpoint.save_counter  # created on first use, as in TF
    checkpoint.read(out).assert_consumed()
    np.testing.assert_array_equal(module.w.numpy(), [1.0, 1.0, 1.0])
    assert int(checkpoint.save_counter.numpy()) == 3  # an int: from the last checkpoint


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extra": np.ones(1)}, r"c1 holds 'extra' and .*c0 does not"),
        ({"w": np.ones(3, np.float64)}, r"'w' is DT_FLOAT\[3\] in .*c0 but DT_DOUBLE\[3\] in .*c1"),
        ({"w": np.ones(4, np.float32)}, r"'w' is DT_FLOAT\[3\] in .*c0 but DT_FLOAT\[4\] in .*c1"),
    ],
)
def test_a_layout_difference_is_named_and_nothing_is_written(tmp_path, change, message) -> None:
    a = tp.save_tensors(str(tmp_path / "c0"), {"w": np.ones(3, np.float32)})
    b = tp.save_tensors(str(tmp_path / "c1"), {"w": np.ones(3, np.float32), **change})
    with pytest.raises(tp.errors.InvalidArgumentError, match=message):
        tp.average([a, b], str(tmp_path / "out" / "mean"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("weights", [("exponential", 1.0), ("exponential", "x"), [1, 2], [1, -1, 1], [0, 0, 0], "x"])
def test_malformed_weights_are_refused(tmp_path, weights) -> None:
    paths, _ = _three(tmp_path)
    with pytest.raises(tp.errors.InvalidArgumentError, match="average: "):
        tp.average(paths, str(tmp_path / "out"), weights)


def test_a_damaged_input_is_reported_and_nothing_is_published(tmp_path) -> None:
    paths = [tp.save_tensors(str(tmp_path / f"c{n}"), {"w": np.arange(10, dtype=np.float32)}) for n in range(2)]
    data = tmp_path / "c1.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[5] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch for key 'w'"):
        tp.average(paths, str(tmp_path / "mean"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("mean")) == []
    with pytest.raises(tp.errors.DataLossError):
        tp.average(paths, str(tmp_path / "new" / "dir" / "mean"))
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_memory_stays_at_the_result_tensor_plus_a_bounded_buffer(tmp_path) -> None:
    size = 12 << 20  # 48 MiB of float32 per checkpoint
    paths = [tp.save_tensors(str(tmp_path / f"c{n}"), {"w": np.full(size, n, np.float32)}) for n in range(3)]
    out, peak = traced_peak(lambda: tp.average(paths, str(tmp_path / "mean")))
    # Reading each input whole and accumulating in float64 would take 48 + 48 + 96 MiB and more.
    assert peak < size * 4 + (40 << 20), peak / 2**20
    assert float(tp.load_variable(out, "w")[-1]) == 1.0


def test_cli_average(tmp_path, capsys) -> None:
    paths = [tp.save_tensors(str(tmp_path / f"c{n}"), {"w": np.float64([n])}) for n in range(3)]
    out = str(tmp_path / "ema")
    assert cli.main(["average", *paths, "-o", out, "--ema", "0.5"]) == 0
    assert f"wrote {out}: 1 tensors" in capsys.readouterr().out
    assert tp.load_variable(out, "w")[0] == 0.25 * 0 + 0.25 * 1 + 0.5 * 2
    assert cli.main(["average", *paths, "-o", str(tmp_path / "w"), "--weights", "0,0,1"]) == 0
    assert tp.load_variable(str(tmp_path / "w"), "w")[0] == 2.0
    assert cli.main(["average", *paths, "-o", str(tmp_path / "bad"), "--weights", "1,x,1"]) == 1
    assert "--weights '1,x,1'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1, "a", 1], r"weight 1 \('a'\) is not a real number"),
        ([1, 1, 2j], r"weight 2 \(2j\) is not a real number"),
        ([True, 1, 1], r"weight 0 \(True\) is not a real number"),
        (["exponential", 0.5, 1], r"weight 0 \('exponential'\) is not a real number.*\('exponential', decay\)"),
        (["exponential", float("nan")], r"exponential decay must be a number in \[0, 1\), not nan"),
        (np.array([[1, 1, 1]]), r"weight 0 .* is not a real number"),
    ],
)
def test_weights_that_are_not_numbers_are_named(tmp_path, weights, message) -> None:
    """A list of weights raised a raw ValueError/TypeError from float()."""
    paths, _ = _three(tmp_path)
    with pytest.raises(tp.errors.InvalidArgumentError, match=message):
        tp.average(paths, str(tmp_path / "out"), weights)
    assert not list(tmp_path.glob("out*"))


def test_inf_with_minus_inf_is_nan_without_a_warning(tmp_path) -> None:
    import warnings

    a = tp.save_tensors(str(tmp_path / "a"), {"w": np.float32([np.inf, 1])})
    b = tp.save_tensors(str(tmp_path / "b"), {"w": np.float32([-np.inf, 3])})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = tp.average([a, b], str(tmp_path / "mean"))
    np.testing.assert_array_equal(tp.load_variable(out, "w"), np.float32([np.nan, 2]))


def test_one_checkpoint_averages_to_a_copy_of_its_floats(tmp_path) -> None:
    """The docstring said "two or more" but one was accepted: one is documented, and gives a copy."""
    paths, values = _three(tmp_path)
    out = tp.average(paths[:1], str(tmp_path / "one"))
    for i in range(len(DTYPES)):
        assert tp.load_variable(out, f"f{i}").tobytes() == np.asarray(values[0][f"f{i}"]).tobytes()
    assert "One or more" in (tp.average.__doc__ or "")


def test_sliced_inputs_are_averaged_slice_by_slice_in_bounded_memory(tmp_path) -> None:
    """Each sliced input was read whole, all at once: 4 sliced inputs of a 32 MiB tensor peaked at 180 MiB."""
    n = 8 << 20
    policy = tp.sharding.MaxShardSizePolicy(max_shard_size=8 << 20)
    options = tp.CheckpointOptions(experimental_sharding_callback=policy)
    shape = (2048, n // 2048)
    paths = [tp.save_tensors(str(tmp_path / f"s{i}"), {"w": np.full(shape, i, np.float32)}, options) for i in range(4)]
    assert len(tp.load_checkpoint(paths[0])._bundle.entry("w").slices) > 1
    out, peak = traced_peak(lambda: tp.average(paths, str(tmp_path / "mean")))
    assert peak < n * 4 + (32 << 20), peak / 2**20
    got = tp.load_variable(out, "w")
    assert got.shape == shape and (got == 1.5).all()


@pytest.mark.parametrize("max_shard_sizes", [(40, 40), (40, 72), (40, None)])
def test_inputs_sliced_alike_or_not_average_to_the_float64_mean(tmp_path, max_shard_sizes) -> None:
    """Slice by slice when every input slices a tensor alike; read whole otherwise (or with a plain input)."""
    rng = np.random.default_rng(5)
    values = [{"big": rng.normal(size=(6, 5, 3)).astype(np.float16), "s": np.float32(n)} for n in range(2)]
    paths = []
    for n, (size, v) in enumerate(zip(max_shard_sizes, values)):
        policy = None if size is None else tp.sharding.MaxShardSizePolicy(max_shard_size=size)
        paths.append(
            tp.save_tensors(str(tmp_path / f"c{n}"), v, tp.CheckpointOptions(experimental_sharding_callback=policy))
        )
    reader = tp.load_checkpoint(tp.average(paths, str(tmp_path / "mean"), [1, 3]))
    assert reader.get_tensor("big").tobytes() == _expected(values, "big", [0.25, 0.75]).tobytes()
    assert reader.get_tensor("s") == np.float32(0.75)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("incomplete_slices", r"key 't': its slices do not cover it exactly"),
        ("overlapping_slices", r"key 't': its slices do not cover it exactly"),
        ("slice_out_of_range", r"key 't': slice \[2, 5\) outside dimension of size 4"),
    ],
)
def test_damaged_slices_are_data_loss_and_nothing_is_written(tmp_path, case, message) -> None:
    prefix = str(pathlib.Path(__file__).resolve().parents[1] / "corrupt" / "corpus" / case / "ckpt")
    with pytest.raises(tp.errors.DataLossError, match=message):
        tp.average([prefix, prefix], str(tmp_path / "out" / "mean"))
    assert not (tmp_path / "out").exists()
