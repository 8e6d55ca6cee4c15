"""torch.distributed.checkpoint with trackpoint's storage: DCP plans, the files are a TF checkpoint."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import trackpoint as tp
from tests.distributed.ranks import init_gloo, run_ranks
from trackpoint._format.bundle_reader import BundleReader

pytestmark = pytest.mark.slow
FULL = (8, 6)


def _full() -> np.ndarray:
    return np.arange(np.prod(FULL), dtype=np.float32).reshape(FULL)


def _state(rank: int, world: int, fill: float | None) -> dict:
    """The job's state at ``rank``: ``w`` row-sharded over the ranks as a DTensor, ``b`` replicated."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = init_device_mesh("cpu", (world,))
    rows = FULL[0] // world
    local = torch.from_numpy(_full()[rank * rows : (rank + 1) * rows].copy())
    if fill is not None:
        local.fill_(fill)
    bias = torch.full((5,), 7.0 if fill is None else fill, dtype=torch.float64)
    w = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
    return {"model": {"w": w, "b": bias}, "epoch": 4 if fill is None else 0}


def _save(rank: int, world: int, work: str) -> None:
    import torch.distributed.checkpoint as dcp

    from trackpoint.torch import TFStorageWriter

    init_gloo(rank, world, os.path.join(work, "init-save"))
    dcp.save(_state(rank, world, None), storage_writer=TFStorageWriter(os.path.join(work, "ckpt")))


def _load(rank: int, world: int, work: str) -> list:
    import torch.distributed.checkpoint as dcp

    from trackpoint.torch import TFStorageReader

    init_gloo(rank, world, os.path.join(work, f"init-load-{world}"))
    state = _state(rank, world, -1.0)
    dcp.load(state, storage_reader=TFStorageReader(os.path.join(work, "ckpt")))
    return [state["model"]["w"].to_local().numpy().tolist(), state["model"]["b"].tolist(), state["epoch"]]


def test_dcp_saves_a_tf_checkpoint_of_dtensor_shards_and_loads_it_at_any_world_size(tmp_path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    from trackpoint.torch import TFStorageReader

    results = run_ranks(_save, 2, str(tmp_path), str(tmp_path))
    assert all("value" in r for r in results), results
    prefix = str(tmp_path / "ckpt")
    names = sorted(n for n in os.listdir(tmp_path) if n.startswith("ckpt"))
    assert names == ["ckpt.data-00000-of-00002", "ckpt.data-00001-of-00002", "ckpt.index"]
    listed = dict(tp.list_variables(prefix))
    assert listed["model.w"] == list(FULL) and listed["model.b"] == [5]
    np.testing.assert_array_equal(tp.load_variable(prefix, "model.w"), _full())  # whole, from the two slices
    with BundleReader(prefix) as reader:
        assert len(reader.entry("model.w").slices) == 2  # one TF slice per rank's shard
        stored = sum(entry.size for entry in reader.entries())
    written = sum(os.path.getsize(tmp_path / n) for n in names if ".data-" in n)
    assert written == stored, "nothing written twice: the replicated bias is in one rank's file"

    # One process, plain tensors, no process group.
    state = {"model": {"w": torch.zeros(FULL), "b": torch.zeros(5, dtype=torch.float64)}, "epoch": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # DCP: "assuming the intent is to load in a single process"
        dcp.load(state, storage_reader=TFStorageReader(prefix))
    np.testing.assert_array_equal(state["model"]["w"].numpy(), _full())
    assert state["model"]["b"].tolist() == [7.0] * 5 and state["epoch"] == 4

    for world in (2, 4):
        loaded = run_ranks(_load, world, str(tmp_path), str(tmp_path))
        rows = FULL[0] // world
        for rank, result in enumerate(loaded):
            assert "value" in result, result
            block, bias, epoch = result["value"]
            np.testing.assert_array_equal(np.array(block, np.float32), _full()[rank * rows : (rank + 1) * rows])
            assert bias == [7.0] * 5 and epoch == 4
