"""Two writers in different PID namespaces (as in two containers) share one directory.

A process id means nothing across namespaces: each writer's cleanup of stale temporaries
must leave the other's alone. Runs the writers under ``unshare --pid`` (needs root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import trackpoint as tp

pytestmark = pytest.mark.slow  # writers in child processes and PID namespaces: seconds

CHILD = os.path.join(os.path.dirname(__file__), "shared_dir_child.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _unshare_works() -> str:
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False)
    return "" if done.returncode == 0 else f"unshare --pid fails here: {done.stderr.decode().strip()}"


@pytest.mark.skipif(bool(_unshare_works()), reason=_unshare_works() or "unshare works")
def test_writers_in_two_pid_namespaces_never_remove_each_others_temporaries(tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    command = f"{sys.executable} {CHILD} {tmp_path} {{name}} 40"
    # In a new namespace the first process has PID 1. One writer runs as PID 1, the other
    # behind a few short-lived processes, so its PID does not exist in the first one's
    # namespace: a cleanup that trusts kill(pid, 0) there deletes its live temporaries.
    writers = [
        subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "sh",
                "-c",
                "for i in 1 2 3 4 5 6 7 8; do /bin/true; done; " + command.format(name=name) + "; exit $?",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if name == "a"
        else subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *command.format(name=name).split()],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    outputs = [writer.communicate(timeout=300) for writer in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0 and out.startswith("ok"), err[-3000:]
    pids = sorted(int(out.split()[1]) for out, _ in outputs)
    assert pids[0] == 1 and pids[1] > 1, f"both writers ran with PIDs {pids} in their namespaces"
    for name in ("a", "b"):
        model = tp.Module()
        model.vs = [tp.Variable(np.zeros(4096, np.float32)) for _ in range(50)]
        tp.Checkpoint(model=model).read(str(tmp_path / name)).assert_consumed()
        assert all(np.all(var.numpy() == 39) for var in model.vs)
