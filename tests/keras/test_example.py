"""examples/keras2_to_keras3.py migrates the Keras 2 CNN to Keras 3 on JAX; the ``.keras`` file it
writes loads in a fresh Keras 3 process and gives Keras 2's outputs (within 1e-5) and optimizer step."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import GOLDEN

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "keras2_to_keras3.py"
CHECK = textwrap.dedent(
    """
    import sys
    import keras, numpy as np
    model = keras.saving.load_model(sys.argv[1])
    expected = np.load(sys.argv[2])
    outputs = np.asarray(keras.ops.convert_to_numpy(model(expected["x0"], training=False)))
    assert np.max(np.abs(outputs - expected["outputs"])) < 1e-5
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 4  # 2 epochs of 2 batches
    print("ok")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("keras") is None or importlib.util.find_spec("jax") is None, reason="needs keras and jax"
)
def test_the_migration_example_writes_a_keras_3_file_that_holds_the_keras_2_model(tmp_path) -> None:
    out = tmp_path / "migrated.keras"
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2")
    example = [sys.executable, str(EXAMPLE), str(GOLDEN / "keras2" / "cnn" / "sw"), str(out)]
    check = [sys.executable, "-c", CHECK, str(out), str(GOLDEN / "keras2" / "cnn" / "expected.npz")]
    outputs = []
    for command in (example, check):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, env=env)
        assert done.returncode == 0, done.stderr[-4000:]
        outputs.append(done.stdout)
    assert "restored 27 variables" in outputs[0] and outputs[1].strip() == "ok"
