"""Two processes on ``jax.distributed`` (127.0.0.1, 4 CPU host devices each) save one checkpoint
(``tests/jax/distributed_side.py``, real processes); it restores onto another mesh, each process
reading only the slices its devices need, and in one process; TensorFlow 2.21 reads it; a
process that dies makes the other's save raise within its timeout."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.interop.tf_process import tf_side

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs JAX"),
]

tf_files = tf_side("files")


def _job(root: Path) -> list[dict[str, Any]]:
    """Run both processes; their reports, in process order."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outs = [root / f"process-{i}.json" for i in range(2)]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.jax.distributed_side", str(i), str(port), str(root), str(outs[i])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        for i in range(2)
    ]
    errors = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        errors.append(err.decode(errors="replace")[-3000:])
    reports = []
    for out, err in zip(outs, errors):
        reports.append(json.loads(out.read_text()) if out.exists() else {"died": err})
    return reports


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    root = tmp_path_factory.mktemp("jax-distributed")
    return _job(root), root


def test_two_processes_save_one_checkpoint_and_restore_it_onto_another_mesh(saved) -> None:
    reports, root = saved
    for report in reports:
        assert "error" not in report, report.get("error")
        assert report["process_count"] == 2
        assert report["prefix"] == str(root / "ckpt-1")
        assert report["restored"] is True and report["key"] is True
    # One checkpoint: each process wrote a data file of its own, one index.
    names = sorted(n for n in os.listdir(root) if n.startswith("ckpt-1"))
    assert names == ["ckpt-1.data-00000-of-00002", "ckpt-1.data-00001-of-00002", "ckpt-1.index"]


def test_each_process_reads_only_the_slices_its_devices_need(saved) -> None:
    reports, _ = saved
    # Process 0's data file is damaged but for the object graph: process 0 needs rows 0-3 of x
    # from it, and says so; process 1 needs rows 4-7 alone, from its own file.
    assert reports[0]["partial"].startswith("DataLossError:")
    assert "state/x/.ATTRIBUTES/VARIABLE_VALUE[0:4," in reports[0]["partial"]
    assert reports[1]["partial"] == "restored"


def test_one_process_restores_what_two_saved(saved) -> None:
    import jax
    import jax.numpy as jnp

    import trackpoint.jax as tpj
    from tests.jax.distributed_side import X, Y, Z

    _, root = saved
    target = {
        "state": {
            "x": jax.ShapeDtypeStruct(X.shape, jnp.float32),
            "z": jax.ShapeDtypeStruct(Z.shape, jnp.float32),
            "y": jax.ShapeDtypeStruct(Y.shape, jnp.int32),
            "key": jax.random.key(0),
        }
    }
    restored = tpj.restore(str(root / "ckpt-1"), target)["state"]
    assert np.array_equal(restored["x"], X) and np.array_equal(restored["z"], Z) and np.array_equal(restored["y"], Y)
    assert np.array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(jax.random.key(5)))


@pytest.mark.interop
def test_tensorflow_reads_the_full_arrays(saved) -> None:
    from tests.jax.distributed_side import X, Y, Z

    _, root = saved
    theirs = tf_files.load(str(root / "ckpt-1"))["tensors"]
    for name, expected in (("x", X), ("z", Z), ("y", Y)):
        value = theirs[f"state/{name}/.ATTRIBUTES/VARIABLE_VALUE"]
        assert value.dtype == expected.dtype and np.array_equal(value, expected), name


def test_a_process_that_dies_makes_the_other_raise_in_bounded_time(saved) -> None:
    reports, _ = saved
    assert "kill" not in reports[1]  # it died while writing its part
    survivor = reports[0]["kill"]
    assert survivor["outcome"].startswith("CoordinationError:"), survivor["outcome"]
    assert "rank 1" in survivor["outcome"] and "killed/ckpt-1" in survivor["outcome"]
    # The timeout is 4 s; a rank that stops saying it lives is noticed within twice that.
    assert survivor["seconds"] < 12, survivor["seconds"]
    assert not any(name.startswith("ckpt-1") for name in survivor["files"]), survivor["files"]


def test_the_default_timeout_raises_before_jax_ends_the_job() -> None:
    """A process that dies just after its last "alive" beat is waited for up to twice the timeout
    (``StoreCoordinator._take`` waits once more while the beat looks new): that must still come
    before JAX's heartbeat timeout ends every process, or the save never raises."""
    import inspect

    import jax.distributed

    from trackpoint.distributed import JaxCoordinator

    heartbeat = inspect.signature(jax.distributed.initialize).parameters["heartbeat_timeout_seconds"].default
    timeout = inspect.signature(JaxCoordinator).parameters["timeout"].default  # building one needs a job
    assert 2 * timeout < heartbeat
