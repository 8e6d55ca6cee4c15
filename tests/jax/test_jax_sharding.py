"""Sharded JAX arrays on 8 CPU host devices (``tests/jax/sharded_side.py`` in a process of its own):
saved from a (2, 4) mesh, restored onto one device, a (4, 2) and an (8,) mesh, by
``trackpoint.jax.restore`` and into live arrays; TensorFlow 2.21 reads the full arrays."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tests.interop.tf_process import tf_side

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs JAX"),
]

tf_files = tf_side("files")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    root = tmp_path_factory.mktemp("sharded")
    out = root / "results.json"
    command = [sys.executable, "-m", "tests.jax.sharded_side", str(root), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text()), str(root)


def test_a_sharded_save_restores_onto_any_mesh(results) -> None:
    data, _ = results
    for label, devices in (("one device", 1), ("(4, 2) mesh", 8), ("(8,) mesh", 8)):
        assert data[label] == {
            "values": True,
            "sharding": True,
            "live_values": True,
            "live_sharding": True,
            "devices": devices,
        }, label


@pytest.mark.interop
def test_tensorflow_reads_the_full_arrays(results) -> None:
    data, root = results
    theirs = tf_files.load(data["prefix"])["tensors"]
    with np.load(os.path.join(root, "values.npz")) as expected:
        for name in ("x", "y"):
            value = theirs[f"state/{name}/.ATTRIBUTES/VARIABLE_VALUE"]
            assert value.dtype == expected[name].dtype and np.array_equal(value, expected[name]), name
