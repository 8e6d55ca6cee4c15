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


def _model_and_optimizer(trained: bool) -> tuple:
    """A model with BatchNorm and its Adam: trained three steps (``num_batches_tracked`` and
    ``step``, both 0-d, are 3), or fresh from another seed (DCP's ``get_state_dict`` gives a
    fresh Adam a zero step, so its ``step`` is 1)."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict

    torch.manual_seed(0 if trained else 1)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    if trained:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(5, 3)).square().sum().backward()
            optimizer.step()
    return model, optimizer, get_state_dict(model, optimizer)


def _every_tensor(model, optimizer) -> dict:
    """Every tensor of the model's and the optimizer's state, 0-d ones included, under the keys DCP
    saves them at: key -> [dtype, shape, values]."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    flat = {f"model.{k}": v for k, v in model_state.items()}
    flat.update({f"optim.state.{p}.{k}": v for p, state in optimizer_state["state"].items() for k, v in state.items()})
    assert all(isinstance(v, torch.Tensor) for v in flat.values())
    return {k: [str(v.dtype), list(v.shape), v.tolist()] for k, v in sorted(flat.items())}


def _load_into_fresh(prefix: str) -> dict:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    from trackpoint.torch import TFStorageReader

    model, optimizer, (model_state, optimizer_state) = _model_and_optimizer(trained=False)
    dcp.load({"model": model_state, "optim": optimizer_state}, storage_reader=TFStorageReader(prefix))
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
    return _every_tensor(model, optimizer)


def _save_trained(rank: int, world: int, work: str) -> dict:
    import torch.distributed.checkpoint as dcp

    from trackpoint.torch import TFStorageWriter

    init_gloo(rank, world, os.path.join(work, "init-save-trained"))
    model, optimizer, (model_state, optimizer_state) = _model_and_optimizer(trained=True)
    dcp.save({"model": model_state, "optim": optimizer_state}, storage_writer=TFStorageWriter(os.path.join(work, "bn")))
    return _every_tensor(model, optimizer)


def _load_trained(rank: int, world: int, work: str) -> dict:
    init_gloo(rank, world, os.path.join(work, "init-load-trained"))
    return _load_into_fresh(os.path.join(work, "bn"))


def save_trained_on_two_ranks(work: str) -> dict:
    """Two ranks save the trained model and optimizer through TFStorageWriter at ``<work>/bn``;
    what they saved, key -> [dtype, shape, values]."""
    saved = run_ranks(_save_trained, 2, work, work)
    assert all("value" in r for r in saved), saved
    assert saved[0]["value"] == saved[1]["value"], "both ranks hold the same (replicated) state"
    return saved[0]["value"]


def test_dcp_loads_back_0d_tensors_batchnorm_counts_and_adam_steps(tmp_path) -> None:
    """Issue 38.2: BatchNorm's ``num_batches_tracked`` and Adam's ``step`` are 0-d tensors; every
    tensor, those included, comes back as saved, at two ranks and in one process."""
    expected = save_trained_on_two_ranks(str(tmp_path))
    zero_d = [k for k, (_, shape, _) in expected.items() if shape == []]
    assert "model.1.num_batches_tracked" in zero_d and "optim.state.0.weight.step" in zero_d
    assert expected["model.1.num_batches_tracked"] == ["torch.int64", [], 3]
    assert expected["optim.state.0.weight.step"] == ["torch.float32", [], 3.0]
    listed = dict(tp.list_variables(str(tmp_path / "bn")))
    assert all(listed[k] == [] for k in zero_d), "stored 0-d, not as one-element vectors"

    loaded = run_ranks(_load_trained, 2, str(tmp_path), str(tmp_path))
    for result in loaded:
        assert "value" in result, result
        assert result["value"] == expected

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # DCP: "assuming the intent is to load in a single process"
        assert _load_into_fresh(str(tmp_path / "bn")) == expected
