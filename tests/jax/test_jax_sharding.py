"""Sharded JAX arrays on 8 CPU host devices (``tests/jax/sharded_side.py`` in a process of its own):
saved from a (2, 4) mesh, each distinct shard once as a TF slice (replicas taking turns),
restored onto one device, a (4, 2) and an (8,) mesh, by ``trackpoint.jax.restore`` and into
live arrays; TensorFlow 2.21 reads the full arrays."""

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
            "others": True,
        }, label


def test_a_spread_live_array_of_another_dtype_or_shape_is_refused_and_kept(results) -> None:
    refusals = results[0]["refusals"]
    assert refusals["dtype"].startswith("kept: ") and "int32" in refusals["dtype"], refusals
    assert "float32" in refusals["dtype"] and "state/x" in refusals["dtype"], refusals
    assert refusals["shape"].startswith("kept: ") and "state/x" in refusals["shape"], refusals
    assert "[8, 8]" in refusals["shape"] or "(8, 8)" in refusals["shape"], refusals


def test_each_shard_is_written_once_as_a_tf_slice(results) -> None:
    data, _ = results
    stored = data["slices"]
    key = "state/{}/.ATTRIBUTES/VARIABLE_VALUE".format
    # x over a (2, 4) mesh: 8 blocks of 4 x 3, each stored once.
    assert stored[key("x")] == [[[r, 4], [c, 3]] for r in (0, 4) for c in (0, 3, 6, 9)]
    # z split over "a" only: 2 shards of 4 replicas each, stored once each, by different devices.
    assert stored[key("z")] == [[[0, 4], [0, 4]], [[4, 4], [0, 4]]]
    assert data["writers"]["z"] == ["cpu:0", "cpu:5"]
    assert data["writers"]["x"] == [f"cpu:{i}" for i in range(8)]
    # A replicated array is stored whole; so is a typed key array's uint32 data split over 8
    # devices (TensorFlow 2.21 cannot assemble uint32 slices: "Dtype uint32 not supported").
    assert key("y") not in stored and key("k") not in stored
    assert data["layout"] == {
        "x": ["float32", [8, 12]],
        "y": ["int32", [5]],
        "z": ["float32", [8, 4]],
        "k": ["uint32", [8, 2]],
    }
    # The slices a save writes are the shards' own memory, not a gathered copy.
    assert data["views"] is True


@pytest.mark.interop
def test_tensorflow_reads_the_full_arrays(results) -> None:
    data, root = results
    theirs = tf_files.load(data["prefix"])["tensors"]
    with np.load(os.path.join(root, "values.npz")) as expected:
        for name in ("x", "y", "z", "k"):
            value = theirs[f"state/{name}/.ATTRIBUTES/VARIABLE_VALUE"]
            assert value.dtype == expected[name].dtype and np.array_equal(value, expected[name]), name
