"""Writers to moto's S3 server killed with SIGKILL at random moments of their saves: after every
kill the newest recorded checkpoint restores whole, every committed index reads completely, and
a restarted writer saves on (past the numbers the dead one left objects under).

Set TP_REMOTE_KILLS for a longer run than CI's 60 (e.g. ``TP_REMOTE_KILLS=600``).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from typing import Any

import numpy as np
import pytest

import trackpoint as tp
from tests.corrupt.crash_child import build, run

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("TP_REMOTE_KILLS", "60"))
MODES = ["manager_sharded", "manager_async", "save"]


def _step_of(prefix: str) -> float:
    """Restore ``prefix`` into fresh objects; every value must hold the one step it was saved at."""
    assert tp.verify_checkpoint(prefix) == [], prefix
    ckpt, model, opt = build(-1.0)
    ckpt.restore(prefix).assert_consumed()
    step = float(model.big.numpy()[0, 0])
    values = [model.big.numpy(), opt.get_slot(model.big, "momentum").numpy()] + [v.numpy() for v in model.rest]
    assert all(np.all(np.asarray(v) == step) for v in values), f"{prefix} mixes saves"
    return step


def _writer(directory: str, mode: str, endpoint: str, ready: Any) -> None:
    import fsspec.config

    fsspec.config.conf["s3"] = {"endpoint_url": endpoint}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    run(directory, mode, ready.set)


@pytest.fixture(scope="module")
def processes() -> Any:
    """Real processes forked from a server that has imported trackpoint and s3fs already: a
    writer starts in milliseconds instead of the second and a half an interpreter takes."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["numpy", "s3fs", "trackpoint", "tests.corrupt.crash_child"])
    return context


def _run_and_kill(processes: Any, endpoint: str, directory: str, mode: str, rng: random.Random) -> None:
    ready = processes.Event()
    child = processes.Process(target=_writer, args=(directory, mode, endpoint, ready))
    child.start()
    try:
        # Killed once it has restored and is saving: kills during start-up test nothing here.
        assert ready.wait(60), "the writer did not start"
        child.join(rng.uniform(0.0, 0.6))
        assert child.exitcode is None, f"the writer stopped by itself (exit code {child.exitcode}); see its stderr"
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    finally:
        child.kill()
    assert child.exitcode == -signal.SIGKILL


def _bundles(s3, directory: str) -> tuple[set[str], set[str]]:
    """The committed prefixes (an index is there) and the prefixes holding only data objects."""
    s3.invalidate_cache()
    names = [f"s3://{p}" for p in s3.find(directory[5:])]
    committed = {n[: -len(".index")] for n in names if n.endswith(".index")}
    data = {n.rsplit(".data-", 1)[0] for n in names if ".data-" in n}
    return committed, data - committed


@pytest.mark.parametrize("mode", MODES)
def test_sigkill_mid_save_leaves_the_previous_checkpoint_and_nothing_half_committed(
    bucket, s3, s3_endpoint, processes, mode
) -> None:
    rng = random.Random(f"{mode}-{KILLS}")
    directory = f"{bucket}/run"
    last_step, mid_upload, checked = 0.0, 0, set()
    for _ in range(max(1, KILLS // len(MODES))):
        _run_and_kill(processes, s3_endpoint, directory, mode, rng)
        committed, uncommitted = _bundles(s3, directory)
        mid_upload += bool(uncommitted)
        latest = tp.latest_checkpoint(directory)
        if latest is None:
            assert last_step == 0.0, "a recorded checkpoint disappeared"
        else:
            step = _step_of(latest)
            assert step >= last_step, "the state object went back in time"
            last_step = step
        for prefix in committed - checked:  # an index is there only when the whole checkpoint is
            _step_of(prefix)  # (once each: nothing at a committed prefix is ever overwritten)
        checked |= committed
        for prefix in tp.get_checkpoint_state(directory).all_model_checkpoint_paths if latest else []:
            assert prefix in committed, f"the state object names {prefix}, whose index is gone"
    if mode.endswith("sharded"):
        # Kills land between the uploads of one save, not only between saves. (A single PUT
        # killed midway leaves no object at all: only a save of several objects can leave some.)
        assert mid_upload > 0
    # A writer after the last kill saves on past what the dead ones left, and clears it: data
    # older than its newest index. Listings give whole seconds, so what a kill left in the
    # second of that index goes at the save after.
    ckpt, model, _ = build(0.0)
    manager = tp.CheckpointManager(ckpt, directory, max_to_keep=2)
    manager.restore_or_initialize()
    assert float(model.big.numpy()[0, 0]) == last_step
    first = manager.save()
    time.sleep(1.1)
    second = manager.save()
    committed, uncommitted = _bundles(s3, directory)
    assert {first, second} <= committed and not uncommitted
