"""trackpoint.torch models wrapped in DistributedDataParallel: every rank calls save, the
checkpoint holds each parameter and optimizer slot once, under the unwrapped module's names."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import trackpoint as tp
from tests.distributed.ranks import init_gloo, run_ranks
from trackpoint._format.bundle_reader import BundleReader

pytestmark = pytest.mark.slow


def _net():  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(0)  # the same start on every rank, as DDP requires
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def _train_and_save(rank: int, world: int, work: str) -> list:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    import trackpoint.torch as tpt

    init_gloo(rank, world, os.path.join(work, "init"))
    model = DistributedDataParallel(_net())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(3):  # each rank its own batch; DDP averages the gradients
        torch.manual_seed(100 * rank + step)
        model(torch.randn(16, 64)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    manager = tp.CheckpointManager(tpt.Checkpoint(model=model, optimizer=optimizer), os.path.join(work, "run"), 2)
    path = manager.save()
    weights = {name: p.detach().numpy().tolist() for name, p in model.module.named_parameters()}
    return [path, weights]


def test_a_ddp_model_is_saved_once_by_all_ranks_under_its_own_names(tmp_path) -> None:
    import torch

    import trackpoint.torch as tpt

    results = run_ranks(_train_and_save, 2, str(tmp_path), str(tmp_path))
    assert all("value" in r for r in results), results
    (path, weights), (other_path, other_weights) = results[0]["value"], results[1]["value"]
    assert path == other_path and weights == other_weights  # replicas, as DDP keeps them
    names = sorted(os.listdir(tmp_path / "run"))
    assert [n for n in names if n.startswith("ckpt-1.")] == [
        "ckpt-1.data-00000-of-00002",
        "ckpt-1.data-00001-of-00002",
        "ckpt-1.index",
    ]
    keys = dict(tp.list_variables(path))
    assert "model/0/weight/.ATTRIBUTES/VARIABLE_VALUE" in keys, "the wrapper adds nothing to a name"
    assert not any("/module/" in key for key in keys)
    with BundleReader(path) as reader:
        stored = sum(reader.entry(key).size for key in keys)
    written = sum(os.path.getsize(tmp_path / "run" / n) for n in names if n.startswith("ckpt-1.data"))
    assert written == stored, "every replicated tensor written once, not once per rank"
    # One process, no wrapper, restores model and optimizer by name.
    model = _net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    tpt.Checkpoint(model=model, optimizer=optimizer).restore(path).assert_consumed()
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), np.array(weights[name], np.float32))
        assert int(optimizer.state[p]["step"]) == 3
