"""examples/keras2_to_keras3.py migrates the Keras 2 CNN to Keras 3 on JAX; the ``.keras`` file it
writes loads back and gives Keras 2's outputs (within 1e-5) and optimizer step."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import GOLDEN
from tests.keras import zoo

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "keras2_to_keras3.py"
# The example, run as a script, then its file loaded back in the same (fresh) Keras 3 process.
RUN_AND_CHECK = textwrap.dedent(
    """
    import runpy, sys
    example, checkpoint, out, expected_path = sys.argv[1:5]
    sys.argv = [example, checkpoint, out]
    runpy.run_path(example, run_name="__main__")
    import keras, numpy as np
    keras.utils.clear_session()
    model = keras.saving.load_model(out)
    expected = np.load(expected_path)
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
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=zoo.FAST_XLA)
    command = [
        sys.executable,
        "-c",
        RUN_AND_CHECK,
        str(EXAMPLE),
        str(GOLDEN / "keras2" / "cnn" / "sw"),
        str(out),
        str(GOLDEN / "keras2" / "cnn" / "expected.npz"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.split("\n")
    assert lines[0].startswith("restored 27 variables") and lines[1] == "ok", done.stdout
