"""Issue 38.12: a save of several processes that cannot go on names the rank at fault.

Ranks whose objects differ are reported at the first difference in a defined order (the
lowest rank that differs from rank 0, then its first differing tensor in save order), on
every rank. A rank that never calls the save (or exits before) is named as the one that did
not arrive by every rank that waits for it, within the coordinator's timeout, instead of the
root being blamed for not answering.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import trackpoint as tp
from tests.distributed.ranks import init_gloo, model, run_ranks

pytestmark = pytest.mark.slow
REST_5 = "model/rest/5/.ATTRIBUTES/VARIABLE_VALUE"
TIMEOUT = 3.0  # the coordinator's, in the test of a rank that never arrives


def _differing(rank: int, world: int, work: str, extra: str) -> list:
    init_gloo(rank, world, os.path.join(work, "init"))
    m = model(rank, world, 1.0)
    if rank == 1:  # a shape mismatch: model/rest/5 holds 43 values, not 42
        m.rest = [*m.rest[:5], tp.Variable(np.zeros(43)), *m.rest[6:]]
    if rank == 2:  # an extra tensor, before rank 1's mismatch in save order or after it
        setattr(m, extra, tp.Variable(np.zeros(3)))
    try:
        tp.Checkpoint(model=m).write(os.path.join(work, "out", "ckpt"))
    except tp.errors.CheckpointError as exc:
        return [type(exc).__name__, str(exc), exc.key, exc.path]
    return []


@pytest.mark.parametrize("extra", ["extra", "zextra"])
def test_the_first_difference_is_the_lowest_differing_rank_at_its_first_differing_tensor(tmp_path, extra) -> None:
    results = run_ranks(_differing, 3, str(tmp_path), str(tmp_path), extra)
    assert all("value" in r for r in results), results
    errors = [r["value"] for r in results]
    kind, message, key, path = errors[0]
    assert kind == "InvalidArgumentError"
    assert path == str(tmp_path / "out" / "ckpt") and path in message
    assert key == REST_5, "the error's key is rank 1's differing tensor"
    first = message.index(f"rank 1: {REST_5} (float64[43])")
    assert f"rank 0: {REST_5} (float64[42])" in message
    later = message.find(f"model/{extra}/")
    assert later == -1 or later > first, "rank 2's extra tensor comes after rank 1's mismatch, if at all"
    assert all(e == errors[0] for e in errors), "every rank raises the same error, key included"
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def _one_never_arrives(rank: int, world: int, work: str, how: str) -> list | None:
    from trackpoint.distributed import TorchCoordinator

    init_gloo(rank, world, os.path.join(work, "init"))
    if rank == world - 1:
        if how == "waits":
            time.sleep(3 * TIMEOUT)  # alive and in the group, but never calls the save
        return None  # "exits": the process ends before the others give up
    m = model(rank, world, 1.0)
    options = tp.CheckpointOptions(coordinator=TorchCoordinator(timeout=TIMEOUT))
    start = time.monotonic()
    try:
        tp.Checkpoint(model=m).write(os.path.join(work, "out", "ckpt"), options=options)
    except tp.errors.CheckpointError as exc:
        return [type(exc).__name__, str(exc), time.monotonic() - start]
    return ["saved", "", time.monotonic() - start]


@pytest.mark.parametrize("how", ["exits", "waits"])
def test_a_rank_that_never_calls_the_save_is_named_by_every_rank_that_waits(tmp_path, how) -> None:
    results = run_ranks(_one_never_arrives, 3, str(tmp_path), str(tmp_path), how)
    assert all("value" in r for r in results), results
    for rank in (1, 0):  # rank 1 waits for the root, the root for rank 2
        kind, message, elapsed = results[rank]["value"]
        assert kind == "CoordinationError", (rank, message)
        assert "rank 2 did not arrive" in message, (rank, message)
        assert "rank 0 did not answer" not in message, (rank, message)
        assert str(tmp_path / "out" / "ckpt") in message, (rank, message)
        assert elapsed < TIMEOUT + 2, f"rank {rank} gave up after {elapsed:.1f} s, beyond the stated bound"
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")
