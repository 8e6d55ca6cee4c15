"""``trackpoint.keras.Checkpoint`` with a ``CheckpointManager`` on the JAX and PyTorch backends, and
the ``ModelCheckpoint`` callback (``tests/keras/keras3_checkpoint.py`` in a process of its own);
then TensorFlow 2.21 reads every value those files hold."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.interop.tf_process import tf_side
from tests.keras import zoo

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("keras") is None or importlib.util.find_spec("jax") is None,
        reason="needs Keras 3 and JAX",
    ),
]

tf_files = tf_side("files")


@pytest.fixture(scope="module", params=["jax", "torch"])
def results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    backend = request.param
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    root = tmp_path_factory.mktemp(f"keras3-{backend}")
    out = root / "results.json"
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=zoo.FAST_XLA)
    command = [sys.executable, "-m", "tests.keras.keras3_checkpoint", str(root), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads(out.read_text())
    assert data["backend"] == backend
    return data


def test_a_resumed_run_continues_bit_for_bit(results: dict[str, Any]) -> None:
    for name in ("cnn", "transformer", "cnn-async"):
        assert results[name]["bit_identical"], name
        assert results[name]["variables"] > 10, name


def test_the_callback_keeps_max_to_keep_checkpoints(results: dict[str, Any]) -> None:
    callback = results["callback"]
    assert [Path(p).name for p in callback["kept"]] == ["ckpt-3", "ckpt-4"]
    assert callback["latest"] == callback["kept"][-1] and callback["epoch_4_restored"]
    assert [Path(p).name for p in callback["by_batch"]] == ["ckpt-1"]  # every 3 of 4 batches
    assert sorted(os.listdir(Path(callback["latest"]).parent)) == [
        "checkpoint",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
    ]


@pytest.mark.interop
def test_tensorflow_reads_every_value(results: dict[str, Any]) -> None:
    for name in ("cnn", "transformer"):
        prefix = results[name]["prefix"]
        with np.load(Path(prefix).parent / "values.npz") as saved:
            expected = {key: saved[key] for key in saved.files}
        theirs = tf_files.load(prefix)["tensors"]
        assert set(theirs) - {"_CHECKPOINTABLE_OBJECT_GRAPH"} == set(expected), name
        assert any(".OPTIMIZER_SLOT" in key for key in expected), name
        assert any("seed_generator" in key for key in expected) == (name == "cnn"), name  # Dropout's
        for key, value in expected.items():
            read = theirs[key]
            if isinstance(read, bytes):  # a scalar string (torch's RNG state): bytes from both readers
                assert value.dtype.kind == "S" and read == value.item(), (name, key)
                continue
            assert read.dtype == value.dtype and read.shape == value.shape, (name, key)
            same = read.tolist() == value.tolist() if value.dtype == object else read.tobytes() == value.tobytes()
            assert same, (name, key)
