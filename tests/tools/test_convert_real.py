"""Every real-world checkpoint in ``../shared/data/real`` converts to safetensors and back, values bit-identical.

Between the two conversions the safetensors file is read by the ``safetensors`` library itself
(``safetensors.numpy.load_file``), so the proof does not rest on trackpoint's own reader. Slots and
``save_counter`` are included, so that every value the checkpoint holds is checked; string
tensors (Keras metadata, the object graph) are what ``skip_unsupported`` leaves out, and the
test checks that nothing else was.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._graph.keys import checkpoint_key, escape_local_name

safetensors_numpy = pytest.importorskip("safetensors.numpy")

REAL = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real"
DIRS = sorted(p.name for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else []


def _prefix(directory: pathlib.Path) -> str:
    (index,) = directory.rglob("*.index")
    return str(index)[: -len(".index")]


def _same_bits(a: object, b: object) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.skipif(not DIRS, reason=f"the real-world checkpoints are not at {REAL} (CI has them beside the checkout)")
@pytest.mark.parametrize("name", DIRS)
def test_real_checkpoint_converts_to_safetensors_and_back_bit_identical(tmp_path, name: str) -> None:
    prefix = _prefix(REAL / name)
    out = tmp_path / "hf"
    result = tp.convert(prefix, str(out), skip_unsupported=True, include_slots=True, include_save_counter=True)
    loaded = safetensors_numpy.load_file(str(out / "model.safetensors"))
    with tp.CheckpointReader(prefix) as reader:  # a prefix ending in "/" is no directory to resolve
        dtypes = reader.get_variable_to_dtype_map()
        skipped = {key for key, _ in result.skipped}
        # Only what safetensors cannot hold is left out: strings (the object graph is never a value).
        assert all(dtypes[key] == np.dtype(object) for key in skipped)
        converted = {row.source for row in result.mapping}
        assert converted | skipped | {"_CHECKPOINTABLE_OBJECT_GRAPH"} >= set(dtypes) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
        assert sorted(loaded) == sorted(row.name for row in result.mapping)
        originals = {row.name: reader.get_tensor(row.source) for row in result.mapping}
    for row in result.mapping:
        assert _same_bits(loaded[row.name], originals[row.name]), row
    back = tp.convert(str(out), str(tmp_path / "back" / "ckpt"))
    assert back.direction == "safetensors->tf"
    with tp.load_checkpoint(str(tmp_path / "back" / "ckpt")) as reader:
        for name_, value in originals.items():
            key = checkpoint_key("/".join(escape_local_name(p) for p in name_.split(".")), "VARIABLE_VALUE")
            assert _same_bits(reader.get_tensor(key), value), name_
    assert tp.verify_checkpoint(str(tmp_path / "back" / "ckpt")) == []


def _has_graph(name: str) -> bool:
    with tp.CheckpointReader(_prefix(REAL / name)) as reader:
        return reader.has_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")


@pytest.mark.skipif(not DIRS, reason=f"the real-world checkpoints are not at {REAL} (CI has them beside the checkout)")
@pytest.mark.parametrize("name", [name for name in DIRS if _has_graph(name)])
def test_with_include_graph_a_real_checkpoint_comes_back_whole(tmp_path, name: str) -> None:
    """Every key, dtype and value (strings too) and the object graph itself, byte for byte."""
    prefix = _prefix(REAL / name)
    out = tmp_path / "hf"
    tp.convert(prefix, str(out), include_graph=True)
    loaded = safetensors_numpy.load_file(str(out / "model.safetensors"))  # still a plain safetensors file
    back = str(tmp_path / "back" / "ckpt")
    if name == "tf2-shahed-temp-part0":  # a per-device part: its graph names the other part's tensors too
        with pytest.raises(tp.errors.DataLossError, match="merge"):
            tp.convert(str(out), back)
        return
    tp.convert(str(out), back)
    with tp.CheckpointReader(prefix) as before, tp.CheckpointReader(back) as after:
        assert after.get_variable_to_dtype_map() == before.get_variable_to_dtype_map()
        assert after.get_variable_to_shape_map() == before.get_variable_to_shape_map()
        for key in before.get_variable_to_shape_map():
            a, b = before.get_tensor(key), after.get_tensor(key)
            if isinstance(a, bytes) or np.asarray(a).dtype == object:
                assert np.array_equal(np.asarray(a, object), np.asarray(b, object)), key
            else:
                assert _same_bits(a, b) and _same_bits(loaded[key], a), key
    assert tp.verify_checkpoint(back) == []
