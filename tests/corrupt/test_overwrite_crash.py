"""SIGKILL writers that overwrite one prefix in place (400 shards, then 1, then 400 ...).

After every kill, trackpoint restores a whole version from the prefix with
``assert_consumed()``, never older than the last one seen. TensorFlow restores it too,
except inside the window the README states (data files renamed, index not yet), which
``previous.inspect`` reports; after the repair the next save (or ``settle``) makes, TensorFlow
reads it again. Set TP_CRASH_KILLS for a longer run (e.g. ``TP_CRASH_KILLS=2000``).
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

import trackpoint as tp
from tests.corrupt.overwrite_server import COUNT, build
from tests.interop.tf_process import tf_side
from trackpoint._storage import previous

# Crash, kill and fuzz runs take seconds: not in the inner loop. TensorFlow reads the states it left.
pytestmark = [pytest.mark.slow, pytest.mark.interop]

SERVER = os.path.join(os.path.dirname(__file__), "overwrite_server.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
KILLS = int(os.environ.get("TP_CRASH_KILLS", "200"))
# The kills run as independent parts, each a writer history of its own, so that pytest-xdist spreads them
# over the cores: one run of 200 kills was a sixth of the suite on one worker. The parts add up to KILLS.
PARTS = 4
TF_SAMPLES = 24  # whole states TensorFlow must read, spread over the parts
MAX_WINDOW = 3.0  # seconds: a writer that cannot save in this fails the test rather than stall it


def _restored_step(prefix: str) -> float:
    ckpt, model = build(-1.0)
    ckpt.read(prefix).assert_consumed()
    values = {float(v) for var in model.vs for v in var.numpy()}
    assert len(values) == 1, f"{prefix} mixes versions {sorted(values)[:4]}"
    return values.pop()


def _snapshot(directory: str, target: str) -> str:
    """Copy the checkpoint's files (not temporaries) to ``target``; return its prefix."""
    os.makedirs(target)
    for name in os.listdir(directory):
        if ".tp-tmp-" not in name:
            shutil.copy2(os.path.join(directory, name), target)
    return os.path.join(target, "weights")


def _tensorflow_reads(prefixes: list[str]) -> list[list]:
    """What TensorFlow reads at each prefix, in the TensorFlow child: ``["ok", values]`` or ``["error", text]``."""
    return tf_side("overwrite").read_each(prefixes, COUNT, timeout=600)


def _kills_in(part: int) -> int:
    return KILLS // PARTS + (1 if part < KILLS % PARTS else 0)


@pytest.mark.parametrize("part", range(PARTS))
def test_sigkill_during_in_place_overwrites_never_leaves_the_prefix_without_a_checkpoint(tmp_path, part) -> None:
    if importlib.util.find_spec("tensorflow") is None:  # not imported here: TensorFlow runs in its own process
        pytest.skip("tensorflow is not installed")
    # Kill times are drawn from [0, window). A fixed window let a slow phase of the machine
    # kill nearly every writer before its first save finished (CI saw two versions in 200
    # kills), so the window widens whenever several kills in a row saw no new version.
    window = 0.35
    directory = str(tmp_path / "run")
    os.makedirs(directory)
    prefix = os.path.join(directory, "weights")
    kills = _kills_in(part)
    rng = random.Random(f"overwrite-{KILLS}-{part}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    server = subprocess.Popen(
        [sys.executable, SERVER, prefix], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    whole, windows = [], []  # (snapshot prefix, step) for TensorFlow
    last = 0.0
    stalled = 0  # kills in a row that saw no new version
    sample_every = max(1, kills // (TF_SAMPLES // PARTS))
    try:
        for kill in range(kills):
            server.stdin.write(f"{int(last) + 1}\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
            time.sleep(rng.uniform(0.0, window))
            os.kill(pid, signal.SIGKILL)
            status = int(server.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"writer ended by itself: {status}"
            if stalled >= 5:  # the machine is slower than the window assumed: widen it
                window, stalled = min(window * 1.5, MAX_WINDOW), 0
            if not os.path.exists(prefix + ".index") and last == 0.0:
                stalled += 1
                continue  # killed before the first save was published
            step = _restored_step(prefix)  # never nothing, never a mix
            assert step >= last, f"kill {kill}: the prefix went back from step {last} to {step}"
            stalled = 0 if step > last else stalled + 1
            last = step
            state = previous.inspect(prefix)
            if state.interrupted and len(windows) < 4:
                windows.append((_snapshot(directory, str(tmp_path / f"window-{kill}")), step))
            elif not state.interrupted and kill % sample_every == 0:
                whole.append((_snapshot(directory, str(tmp_path / f"whole-{kill}")), step))
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert last > 3, f"the writers were killed before they saved anything (kill window {window:.2f} s)"
    # TensorFlow reads every sampled state outside its window, as the version trackpoint read.
    results = _tensorflow_reads([p for p, _ in whole])
    for (snap, step), (outcome, detail) in zip(whole, results):
        assert outcome == "ok" and detail == [step], f"{snap}: TensorFlow says {detail}"
    # Once the previous version is kept, TensorFlow reads it until the first data file is
    # replaced, and then refuses the mixed files (a checksum error), never a wrong value; the
    # repair that the next save begins with makes them readable to it again.
    if windows:
        for (snap, step), (outcome, detail) in zip(windows, _tensorflow_reads([p for p, _ in windows])):
            assert outcome == "error" or detail == [step], f"{snap}: TensorFlow read the mixed files as {detail}"
        for snap, step in windows:
            assert previous.settle(snap) is True and _restored_step(snap) == step
        for (snap, step), (outcome, detail) in zip(windows, _tensorflow_reads([p for p, _ in windows])):
            assert outcome == "ok" and detail == [step], f"{snap} after the repair: TensorFlow says {detail}"
    # A save that completes leaves exactly its own files: no stale shards, temporaries or kept versions.
    ckpt, _ = build(last + 1)
    ckpt.write(prefix, tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(1 << 30)))
    assert sorted(os.listdir(directory)) == ["weights.data-00000-of-00001", "weights.index"]
    assert _restored_step(prefix) == last + 1
