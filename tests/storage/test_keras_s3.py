"""``trackpoint.keras.restore`` reads a Keras 2 checkpoint from an object store (moto's S3 server): the
directory URL with its ``checkpoint`` file, in a Keras 3 process on JAX."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import GOLDEN
from tests.keras import zoo

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("keras") is None or importlib.util.find_spec("jax") is None,
        reason="needs Keras 3 and JAX",
    ),
]

RESTORE = textwrap.dedent(
    """
    import sys
    import keras, numpy as np
    import trackpoint.keras as tpk
    from tests.keras import zoo
    model = zoo.build("cnn", keras)
    model.compile(optimizer=zoo.optimizer("cnn", keras), loss="mse")
    report = tpk.restore(model, sys.argv[1], optimizer=model.optimizer)
    expected = np.load(sys.argv[2])
    outputs = np.asarray(keras.ops.convert_to_numpy(model(expected["x0"], training=False)))
    print(report.complete, len(report.restored), float(np.max(np.abs(outputs - expected["outputs"]))) < 1e-5)
    """
)


def test_a_keras_2_checkpoint_restores_from_s3(bucket, s3) -> None:
    local = GOLDEN / "keras2" / "cnn" / "sw"
    for name in os.listdir(local):
        s3.put(str(local / name), f"{bucket}/cnn/sw/{name}")
    env = dict(
        os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=zoo.FAST_XLA
    )  # the server's endpoint and keys too
    command = [sys.executable, "-c", RESTORE, f"{bucket}/cnn/sw", str(GOLDEN / "keras2" / "cnn" / "expected.npz")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == ["True", "27", "True"]
