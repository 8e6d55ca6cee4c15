"""The tools stream every large tensor in bounded chunks (issue 39): no allocation as large as a tensor.

``convert`` (both ways), ``average`` and ``rewrite`` (with and without a cast) each read a large
tensor, check its crc32c and write it (cast, or averaged) a chunk at a time through one reused
scratch buffer. A buffer as large as the largest tensor was a fresh numpy/bytearray allocation
that numpy advises for huge pages, whose faults may run memory compaction. tracemalloc sees
numpy's and bytearray's allocations, so its peak pins that none comes back. The output stays
byte for byte what writing each whole tensor gives.
"""

from __future__ import annotations

import os
import pathlib

import ml_dtypes
import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import traced_peak
from trackpoint._format.bundle_reader import BundleReader
from trackpoint.tools._safetensors_writer import SafetensorsWriter

_ELEMENTS = 4 << 20  # float32: 16 MiB per tensor
_BOUND = 8 << 20  # well below one tensor


def _values(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"w{i}": rng.normal(size=_ELEMENTS).astype(np.float32) for i in range(2)}


def _checkpoint(prefix: pathlib.Path, values: dict[str, np.ndarray]) -> str:
    model = tp.Module()
    for key, value in values.items():
        setattr(model, key, tp.Variable(value))
    return tp.Checkpoint(model=model).write(str(prefix))


def _key(name: str) -> str:
    return f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE"


def _files(prefix: str) -> dict[str, bytes]:
    directory = pathlib.Path(prefix).parent
    name = pathlib.Path(prefix).name
    return {p.name[len(name) :]: p.read_bytes() for p in directory.iterdir() if p.name.startswith(name + ".")}


def test_convert_safetensors_to_tf_holds_no_whole_tensor(tmp_path) -> None:
    values = _values(1)
    src = str(tmp_path / "model.safetensors")
    with SafetensorsWriter(src, [(k, v.dtype, v.shape) for k, v in values.items()]) as writer:
        for key, value in values.items():
            writer.write(key, value)
    out = str(tmp_path / "tf" / "ckpt")
    _, peak = traced_peak(lambda: tp.convert(src, out))
    assert peak < _BOUND, peak / 2**20
    for key, value in values.items():
        np.testing.assert_array_equal(tp.load_variable(out, f"{key}/.ATTRIBUTES/VARIABLE_VALUE"), value)


def test_convert_tf_to_safetensors_holds_no_whole_tensor(tmp_path) -> None:
    values = _values(2)
    src = _checkpoint(tmp_path / "src" / "ckpt", values)
    _, peak = traced_peak(lambda: tp.convert(src, str(tmp_path / "st")))
    assert peak < _BOUND, peak / 2**20
    from safetensors.numpy import load_file

    loaded = load_file(str(tmp_path / "st" / "model.safetensors"))
    for key, value in values.items():
        np.testing.assert_array_equal(loaded[f"model.{key}"], value)


@pytest.mark.slow  # large tensors averaged under tracemalloc: about a second
def test_average_holds_no_whole_tensor(tmp_path) -> None:
    first, second = _values(3), _values(4)
    paths = [_checkpoint(tmp_path / name / "ckpt", v) for name, v in (("a", first), ("b", second))]
    out = str(tmp_path / "mean" / "ckpt")
    _, peak = traced_peak(lambda: tp.average(paths, out))
    assert peak < _BOUND, peak / 2**20
    for key in first:
        expected = (first[key].astype(np.float64) * 0.5 + second[key].astype(np.float64) * 0.5).astype(np.float32)
        assert tp.load_variable(out, _key(key)).tobytes() == expected.tobytes()


@pytest.mark.parametrize("cast", [None, "float16", "bfloat16"])
def test_rewrite_holds_no_whole_tensor(tmp_path, cast) -> None:
    values = _values(5)
    src = _checkpoint(tmp_path / "src" / "ckpt", values)
    out = str(tmp_path / "out" / "ckpt")
    casts = {"model": cast} if cast else None
    _, peak = traced_peak(lambda: tp.rewrite(src, out, rename={"model/w0": "model/v0"}, cast=casts))
    assert peak < _BOUND, peak / 2**20
    for name, value in values.items():
        expected = value.astype(cast) if cast else value
        got = tp.load_variable(out, _key("v0" if name == "w0" else name))
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()


# -- the same bytes as a save of each whole tensor -------------------------------------------------


def _mixed(seed: int) -> dict[str, object]:
    """Dtypes and shapes that take the streamed path (larger than one chunk, bfloat16, float64, an
    int64 copied) and the others (tiny, empty, scalar, bool, strings)."""
    rng = np.random.default_rng(seed)
    return {
        "big/f32": rng.normal(size=(3, 250_007)).astype(np.float32),  # 3 MiB: more than one chunk
        "big/bf16": rng.normal(size=1_200_007).astype(ml_dtypes.bfloat16),
        "f64": rng.normal(size=300_001) * 1e3,
        "f16": rng.normal(size=70_001).astype(np.float16),
        "c64": (rng.normal(size=1000) + 1j * rng.normal(size=1000)).astype(np.complex64),
        "i64": rng.integers(-1000, 1000, size=600_000),
        "tiny": np.float32([1.5, -2.5, 3.25]),
        "flag": np.array([True, False, True]),
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.float32(seed),
        "name": b"hello",
        "names": np.array([b"a", b"bc"], dtype=object),
    }


def test_a_streamed_rewrite_writes_what_a_save_of_the_cast_values_writes(tmp_path) -> None:
    values = _mixed(6)
    src = tp.save_tensors(str(tmp_path / "src"), values)
    casts = {"big/f32": "bfloat16", "big/bf16": "float32", "f64": "float16", "i64": "int16", "f16": "float64"}
    out = tp.rewrite(src, str(tmp_path / "out"), cast=casts)
    expected = {k: np.asarray(v).astype(casts[k]) if k in casts else v for k, v in values.items()}
    reference = tp.save_tensors(str(tmp_path / "ref"), expected)  # rewrite keeps the source's order
    assert _files(out) == _files(reference)


def test_a_streamed_average_writes_what_a_save_of_the_float64_mean_writes(tmp_path) -> None:
    inputs = [_mixed(7), _mixed(8), _mixed(9)]
    paths = [tp.save_tensors(str(tmp_path / f"in{n}"), v) for n, v in enumerate(inputs)]
    weights = [0.2, 0.3, 0.5]
    out = tp.average(paths, str(tmp_path / "mean"), weights)
    expected: dict[str, object] = {}
    for key, last in sorted(inputs[-1].items()):  # average writes in the index's (sorted) order
        array = np.asarray(last)
        if array.dtype.kind in "fcV" and array.dtype != object:
            wide = np.complex128 if array.dtype.kind == "c" else np.float64
            total = np.zeros(array.shape, wide)
            for value, weight in zip(inputs, weights):
                total += np.asarray(value[key]).astype(wide) * weight
            expected[key] = total.astype(array.dtype)
        else:
            expected[key] = last
    reference = tp.save_tensors(str(tmp_path / "ref"), expected)
    assert _files(out) == _files(reference)


def test_a_streamed_conversion_writes_each_tensor_whole_and_in_order(tmp_path) -> None:
    values = {k.replace("/", "."): np.asarray(v) for k, v in _mixed(10).items() if np.asarray(v).dtype.kind not in "OS"}
    values = {k: v for k, v in values.items() if v.dtype != np.complex64}  # safetensors holds no complex64
    src = str(tmp_path / "model.safetensors")
    with SafetensorsWriter(src, [(k, v.dtype, v.shape) for k, v in values.items()]) as writer:
        for key, value in values.items():
            writer.write(key, value)
    out = tp.convert(src, str(tmp_path / "tf" / "ckpt")).files[-1][: -len(".index")]
    assert tp.verify_checkpoint(out) == []
    with BundleReader(out) as bundle:
        entries = sorted(
            (e for e in bundle.entries() if not e.key.startswith("_CHECKPOINTABLE")), key=lambda e: e.offset
        )
        data = pathlib.Path(bundle.data_path(0)).read_bytes()
    position = 0
    for entry in entries:  # densely packed, each tensor's bytes its value's
        assert entry.offset == position
        position += entry.size
        name = entry.key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE").replace("/", ".")
        expected = values[name].tobytes() if name in values else np.int64(0).tobytes()
        assert data[entry.offset : entry.offset + entry.size] == expected, name


# -- damage found at a tensor's end: nothing published -----------------------------------------------


def _damage_middle(prefix: str, key: str) -> None:
    with BundleReader(prefix) as bundle:
        entry = bundle.entry(key)
        path = bundle.data_path(entry.shard_id)
    with open(path, "r+b") as f:
        f.seek(entry.offset + entry.size // 2)
        byte = f.read(1)
        f.seek(entry.offset + entry.size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("tool", ["rewrite", "rewrite-cast", "average", "convert"])
def test_a_checksum_mismatch_at_a_streamed_tensors_end_publishes_nothing(tmp_path, tool) -> None:
    values = _mixed(11)
    src = tp.save_tensors(str(tmp_path / "src"), values)
    _damage_middle(src, "big/f32")
    dst = tmp_path / "out"
    with pytest.raises(tp.errors.DataLossError, match=r"checksum mismatch for key 'big/f32'") as raised:
        if tool == "rewrite":
            tp.rewrite(src, str(dst / "ckpt"))
        elif tool == "rewrite-cast":
            tp.rewrite(src, str(dst / "ckpt"), cast={"big": "bfloat16"})
        elif tool == "average":
            tp.average([src, src], str(dst / "ckpt"))
        else:
            tp.convert(src, str(dst), keys="tf", skip_unsupported=True)
    assert "data-00000-of-00001" in str(raised.value)
    assert not dst.exists()


def test_an_int_cast_out_of_range_in_a_later_chunk_names_the_value_and_its_index(tmp_path) -> None:
    values = np.zeros((2, 1_000_000), np.int64)
    values[1, 999_998] = 40_000
    src = tp.save_tensors(str(tmp_path / "src"), {"n": values})
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'n' to int16 .*\[-32768, 32767\].*40000.*\[1, 999998\]"):
        tp.rewrite(src, str(tmp_path / "out" / "ckpt"), cast={"n": "int16"})
    assert not (tmp_path / "out").exists()
    assert sorted(os.listdir(tmp_path)) == ["src.data-00000-of-00001", "src.index"]
