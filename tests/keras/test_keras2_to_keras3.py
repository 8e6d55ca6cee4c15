"""Keras 2 checkpoints (``tests/golden/keras2``, written by ``tf_keras`` 2.21 with TF 2.21 through
``tests/keras/make_keras2.py``) restored by ``trackpoint.keras.restore`` into the same architectures
built with Keras 3, on the JAX and the PyTorch backend, in processes where TensorFlow cannot be
imported (``tests/keras/keras3_side.py``).

For every model of the zoo and every way Keras 2 saved it: nothing missing, unexpected or
mismatched; every restored variable (weights and optimizer state) holds the checkpoint's bytes;
outputs within 1e-5 of Keras 2's; the loss after one more training step within 1e-5 of Keras 2's
(and not without the restored optimizer state). And strictness: an extra layer and a wider one
are named, and nothing changes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import GOLDEN
from tests.keras import zoo

# Keras 3 only in the side processes: imported here without KERAS_BACKEND, it would load TensorFlow.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="Keras 3 is not installed"),
]

ROOT = GOLDEN / "keras2"
MODELS = ("cnn", "two_inputs", "lstm", "gru", "transformer", "subclassed", "nested", "frozen")
BACKENDS = ["jax", "torch"]


@pytest.fixture(scope="module", params=BACKENDS)
def results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    backend = request.param
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    out = tmp_path_factory.mktemp(backend) / "results.json"
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=zoo.FAST_XLA)
    command = [sys.executable, "-m", "tests.keras.keras3_side", str(ROOT), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads(Path(out).read_text())
    assert data["backend"] == backend
    return data


def _models(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: data[name] for name in MODELS}


def test_every_model_restores_whole_and_bit_equal(results: dict[str, Any]) -> None:
    for name, result in _models(results).items():
        for way in ("sw", "mc", "tc"):  # save_weights, ModelCheckpoint, tf.train.Checkpoint
            restored = result[way]
            assert restored["complete"], (name, way)
            # Every weight and every optimizer variable but the learning rate.
            assert restored["restored"] == restored["model_weights"] + restored["optimizer_state"] - 1, (name, way)
            assert restored["differing"] == [], (name, way)


def test_outputs_and_the_next_step_match_keras_2(results: dict[str, Any]) -> None:
    for name, result in _models(results).items():
        assert result["output_diff"] < 1e-5, name
        assert result["loss_diff"] < 1e-5, name
    # Without the optimizer's restored state the same step lands elsewhere.
    controls = {k: v["loss_diff"] for k, v in results.items() if k.endswith("/control")}
    assert len(controls) == 2 and all(diff > 1e-5 for diff in controls.values()), controls


def test_strict_names_an_extra_and_a_wider_layer_and_changes_nothing(results: dict[str, Any]) -> None:
    extra, wider = results["strict"]["extra layer"], results["strict"]["wider layer"]
    for case in (extra, wider):
        assert case["unchanged"] and "nothing was restored" in case["message"]
    assert "missing from the checkpoint" in extra["message"] and extra["message"].count("/dense_") >= 2
    assert len(extra["lenient"]["missing"]) == 2 and len(extra["lenient_restored"]) == 4
    assert "float32[4, 6] here, float32[4, 5] in the checkpoint" in wider["message"]
    assert "has no weights yet; build it first" in results["strict"]["unbuilt"]["message"]
    assert len(wider["lenient"]["mismatched"]) == 3 and len(wider["lenient_restored"]) == 1


def test_no_tensorflow(results: dict[str, Any]) -> None:
    """The side process cannot import TensorFlow (as where it is not installed), and trackpoint
    never tried; Keras may try, as it does wherever TensorFlow might be, and goes on without."""
    assert not results["tensorflow_imported"]
    assert results["tensorflow_attempts_by_trackpoint"] == []
