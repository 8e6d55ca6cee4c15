"""Kill saving processes with SIGKILL at random moments; every survivor must restore to one whole state.

Set TP_CRASH_KILLS for a longer run than CI's (e.g. ``TP_CRASH_KILLS=2000 pytest tests/corrupt/test_crash.py``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import trackpoint as tp
from tests.corrupt.crash_child import build
from trackpoint._storage import previous

pytestmark = pytest.mark.slow  # crash, kill and fuzz runs take seconds: not in the inner loop

CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
KILLS = int(os.environ.get("TP_CRASH_KILLS", "120"))
MODES = ["manager", "manager_async", "save", "save_async", "write", "write_async"]


def _check_consistent(prefix: str) -> float:
    """Restore ``prefix`` into fresh objects with assert_consumed; return the one step it holds."""
    problems = tp.verify_checkpoint(prefix)
    if previous.inspect(prefix).interrupted:  # killed inside TF's window: reported, the kept version checked
        assert len(problems) == 1 and "overwrite of this checkpoint was interrupted" in problems[0].message
    else:
        assert problems == []
    ckpt, model, opt = build(-1.0)
    status = ckpt.read(prefix) if prefix.endswith("fixed") else ckpt.restore(prefix)
    status.assert_consumed()
    step = float(model.big.numpy()[0, 0])
    values = [model.big.numpy(), opt.get_slot(model.big, "momentum").numpy()] + [v.numpy() for v in model.rest]
    assert all(np.all(np.asarray(v) == step) for v in values), f"{prefix} mixes saves"
    assert model.tag.numpy() == f"step {step:g}".encode()
    return step


def _run_and_kill(directory: str, mode: str, rng: random.Random) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen(
        [sys.executable, CHILD, directory, mode], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    time.sleep(rng.uniform(0.15, 0.7))
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, err.decode(errors="replace")


@pytest.mark.parametrize("mode", MODES)
def test_sigkill_at_random_moments_leaves_a_whole_checkpoint(tmp_path, mode: str) -> None:
    rng = random.Random(f"{mode}-{KILLS}")
    directory = str(tmp_path)
    last_step = 0.0
    for _ in range(max(1, KILLS // len(MODES))):
        _run_and_kill(directory, mode, rng)
        if mode.startswith("write"):
            prefix = os.path.join(directory, "fixed")
            if os.path.exists(prefix + ".index"):
                last_step = _check_consistent(prefix)
            else:  # once written, an overwrite never leaves the prefix without a checkpoint
                assert last_step == 0.0, "the fixed prefix lost its checkpoint"
            continue
        latest = tp.latest_checkpoint(directory)
        if latest is None:
            assert last_step == 0.0, "a complete checkpoint disappeared"
            continue
        step = _check_consistent(latest)
        assert step >= last_step, "the state file went back in time"
        last_step = step
        state = tp.get_checkpoint_state(directory)
        for listed in state.all_model_checkpoint_paths:  # nothing listed is half-written
            if os.path.exists(listed + ".index"):
                _check_consistent(listed)
    # A save that completes cleans up what the killed ones left behind.
    ckpt, _, _ = build(1.0)
    ckpt.write(os.path.join(directory, "final"))
    assert not [name for name in os.listdir(directory) if ".tp-tmp-" in name]
