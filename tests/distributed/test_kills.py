"""A rank SIGKILLed at a random moment of a save of several processes, again and again.

The store lives in the test process (as torchrun's agent hosts it), so it outlives every
rank. After each kill: the survivors raise ``CoordinationError`` within the stated timeout
(none hangs), nothing half-written is committed, and the next job's ranks each restore the
newest recorded checkpoint whole, one step everywhere. ``TP_DIST_KILLS`` sets how many
kills (30 by default).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import time

import numpy as np
import pytest

dist = pytest.importorskip("torch.distributed")

import trackpoint as tp
from tests.distributed.ranks import context, full_value, model, rows
from trackpoint.distributed import TorchCoordinator

pytestmark = pytest.mark.slow
TIMEOUT = 1.0  # the coordinator's: a dead rank is noticed within about twice this


def _rank(rank: int, world: int, port: int, directory: str, ready: object, out: str) -> None:
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    coordinator = TorchCoordinator(store=store, rank=rank, world_size=world, timeout=TIMEOUT)
    m = model(rank, world, 0.0)
    manager = tp.CheckpointManager(tp.Checkpoint(model=m), directory, max_to_keep=2)
    restored = manager.restore_or_initialize()
    step = float(m.rest[0].numpy()[0]) if restored else 0.0
    start, stop = rows(rank, world)
    consistent = bool(np.array_equal(m.w.numpy(), full_value(step)[start:stop])) and all(
        float(v.numpy()[0]) == step + i for i, v in enumerate(m.rest)
    )
    with open(out, "w") as f:
        json.dump({"restored": restored, "step": step, "consistent": consistent}, f)
    ready.set()  # type: ignore[attr-defined]
    options = tp.CheckpointOptions(coordinator=coordinator)
    try:
        while True:
            step += 1
            m.w.assign(full_value(step)[start:stop])
            for i, v in enumerate(m.rest):
                v.assign(np.full(v.shape, step + i, np.float64))
            manager.save(options=options)
    except tp.errors.CoordinationError as exc:
        # Beside the restore's report, not over it: on a loaded machine a peer may outlast the
        # timeout before the parent has read that report (a save that then fails, as it must).
        with open(out + ".error", "w") as f:
            json.dump({"error": str(exc), "at": time.monotonic()}, f)


def test_ranks_killed_mid_save_commit_nothing_and_the_survivors_fail_fast(tmp_path):
    kills = int(os.environ.get("TP_DIST_KILLS", "30"))
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    directory = str(tmp_path / "run")
    ctx, rng = context(), random.Random(1234)
    last_step = 0.0
    for kill in range(kills):
        world = rng.choice([2, 4])
        ready = [ctx.Event() for _ in range(world)]
        outs = [str(tmp_path / f"out-{kill}-{r}.json") for r in range(world)]
        procs = [
            ctx.Process(target=_rank, args=(r, world, store.port, directory, ready[r], outs[r])) for r in range(world)
        ]
        for p in procs:
            p.start()
        assert all(e.wait(60) for e in ready), "the ranks did not start"
        for out in outs:  # every rank restored the newest recorded checkpoint, whole
            with open(out) as f:
                state = json.load(f)
            assert state["consistent"], (kill, state)
            assert state["step"] >= last_step, "the state file went back in time"
            last_step = state["step"]
        time.sleep(rng.uniform(0.05, 0.6))
        victim = rng.randrange(world)
        os.kill(procs[victim].pid, signal.SIGKILL)
        killed_at = time.monotonic()
        for p in procs:
            p.join(30)
        assert not any(p.is_alive() for p in procs), "a surviving rank hangs"
        for r, out in enumerate(outs):
            if r == victim:
                continue
            with open(out + ".error") as f:  # every survivor raised CoordinationError (none hangs)
                state = json.load(f)
            assert state["at"] - killed_at < 4 * TIMEOUT + 3, "a survivor took too long to notice"
        latest = tp.latest_checkpoint(directory)
        if latest is not None:
            assert not tp.verify_checkpoint(latest), latest
    assert last_step > 0, "no save ever completed"
