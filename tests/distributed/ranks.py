"""Real processes for the multi-process tests: each rank a process forked from a server that
has imported torch and trackpoint already (a rank then starts in a fraction of a second).

A rank runs ``target(rank, world, *args)`` and writes what it returned, or the error it
raised, to ``<work>/rank-<r>.json``; :func:`run_ranks` gives those back in rank order.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

import trackpoint as tp
from trackpoint.distributed import ShardedVariable

FULL = (12, 6)  # every test model's sharded tensor: rows split over the ranks
REPLICATED = 9  # and this many replicated variables of different sizes


def context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "torch.distributed", "trackpoint", "tests.distributed.ranks"])
    return ctx


def full_value(step: float) -> np.ndarray:
    return (np.arange(np.prod(FULL), dtype=np.float32).reshape(FULL) + 1000 * step).astype(np.float32)


def rows(rank: int, world: int) -> tuple[int, int]:
    """The rows of the sharded tensor rank ``rank`` of ``world`` holds (uneven splits included)."""
    bounds = np.linspace(0, FULL[0], world + 1).round().astype(int)
    return int(bounds[rank]), int(bounds[rank + 1])


def model(rank: int, world: int, step: float) -> tp.Module:
    """The job's state as rank ``rank`` holds it: its rows of ``w``, and every replicated variable."""
    start, stop = rows(rank, world)
    m = tp.Module()
    m.w = ShardedVariable(full_value(step)[start:stop], FULL, (start, 0))
    m.rest = [tp.Variable(np.full((i + 1) * 7, step + i, np.float64)) for i in range(REPLICATED)]
    return m


def assign_step(m: tp.Module, rank: int, world: int, step: float) -> None:
    """Give rank ``rank``'s model the values of ``step`` (its rows of ``w``, every replicated variable)."""
    start, stop = rows(rank, world)
    m.w.assign(full_value(step)[start:stop])
    for i, v in enumerate(m.rest):
        v.assign(np.full(v.shape, step + i, np.float64))


def _child(target: Callable[..., Any], rank: int, world: int, work: str, args: tuple[Any, ...]) -> None:
    out: dict[str, Any]
    try:
        out = {"value": target(rank, world, *args)}
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out = {"error": type(exc).__name__, "message": str(exc), "trace": traceback.format_exc()}
    with open(os.path.join(work, f"rank-{rank}.json"), "w") as f:
        json.dump(out, f)


def init_gloo(rank: int, world: int, init_file: str) -> None:
    """Join the job's torch.distributed group (gloo, rendezvous through a file)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)


def run_ranks(
    target: Callable[..., Any], world: int, work: str, *args: Any, timeout: float = 120
) -> list[dict[str, Any]]:
    """Run ``target`` on ``world`` ranks at once; each rank's ``{"value": ...}`` or ``{"error": ...}``."""
    ctx = context()
    procs = [ctx.Process(target=_child, args=(target, r, world, work, args)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, f"{len(alive)} ranks hung"
    results = []
    for r in range(world):
        with open(os.path.join(work, f"rank-{r}.json")) as f:
            results.append(json.load(f))
        os.remove(os.path.join(work, f"rank-{r}.json"))
    return results
