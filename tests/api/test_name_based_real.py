"""Every real-world checkpoint without an object graph in ``../shared/data/real`` (the 21 TF1 ``Saver``
and Estimator checkpoints, and a TF2 per-device part) restores by name into ``tp.Variable``\\ s named
after its keys, each with the bytes TensorFlow 2.21 read from it (``tf_expected.json``, sha256 of
each value), and the status's assertions pass."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest

import trackpoint as tp

REAL = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real"
EXPECTED = json.loads((REAL / "tf_expected.json").read_text())["checkpoints"] if REAL.is_dir() else {}
NAME_BASED = sorted(
    name for name, entry in EXPECTED.items() if "_CHECKPOINTABLE_OBJECT_GRAPH" not in entry.get("keys", {})
)


def _zeros(dtype: str, shape: list[int]) -> np.ndarray:
    return np.full(shape, b"", dtype=object) if dtype == "string" else np.zeros(shape, dtype)


def _sha256(value: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()


def test_the_real_world_checkpoints_include_the_tf1_ones() -> None:
    if not EXPECTED:
        pytest.skip(f"the real-world checkpoints are not at {REAL} (CI has them beside the checkout)")
    assert sum(name.startswith("tf1-") for name in NAME_BASED) == 21


@pytest.mark.skipif(not NAME_BASED, reason=f"the real-world checkpoints are not at {REAL}")
@pytest.mark.parametrize("name", NAME_BASED)
def test_a_real_tf1_checkpoint_restores_by_name_with_the_values_tf_reads(name: str) -> None:
    entry = EXPECTED[name]
    keys = entry["keys"]
    model = tp.Module()
    model.weights = [tp.Variable(_zeros(spec["dtype"], spec["shape"]), name=key) for key, spec in keys.items()]
    status = tp.Checkpoint(model=model).restore(f"{REAL}/{entry['prefix']}")  # "model/" keeps its separator
    assert isinstance(status, tp.NameBasedSaverStatus)
    status.assert_consumed()
    assert set(status.report().matched) == set(keys)
    for variable in model.weights:
        value = variable.numpy()
        assert value.dtype != object, "no real TF1 checkpoint holds strings"
        assert _sha256(value) == keys[variable.name]["sha256"], variable.name
