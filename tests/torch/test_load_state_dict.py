"""trackpoint.torch.load_state_dict: torch's names, strict checks before anything changes, DDP wrappers."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import trackpoint as tp
import trackpoint.torch as tpt
from trackpoint.errors import InvalidArgumentError


def _model() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))


def _fill(model: torch.nn.Module, value: float) -> None:
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if isinstance(tensor, torch.Tensor):  # not a module's extra state
                tensor.fill_(value)


def test_it_loads_every_name_and_reports_none_missing(tmp_path) -> None:
    source = _model()
    _fill(source, 2.0)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = _model()
    assert tpt.load_state_dict(target, path) == tpt.IncompatibleKeys([], [], [])
    for key, value in target.state_dict().items():
        assert torch.equal(value, source.state_dict()[key]), key


def test_strict_refuses_missing_and_unexpected_names_before_changing_anything(tmp_path) -> None:
    path = tpt.Checkpoint(model=_model()).write(str(tmp_path / "ckpt"))
    target = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2), torch.nn.Linear(2, 1)
    )
    _fill(target, 7.0)
    with pytest.raises(InvalidArgumentError) as caught:
        tpt.load_state_dict(target, path)
    message = str(caught.value)
    assert "missing from the checkpoint: 3.bias, 3.weight" in message and "nothing was loaded" in message
    assert all(bool((v == 7.0).all()) for v in target.state_dict().values())


def test_non_strict_loads_what_both_have_and_returns_the_rest(tmp_path) -> None:
    source = _model()
    _fill(source, 3.0)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = torch.nn.Sequential(torch.nn.Linear(3, 4))
    keys = tpt.load_state_dict(target, path, strict=False)
    assert keys.missing_keys == []
    assert "2.weight" in keys.unexpected_keys and "1.running_mean" in keys.unexpected_keys
    assert bool((target[0].weight == 3.0).all())


def test_a_prefix_selects_a_submodule_of_the_checkpoint(tmp_path) -> None:
    source = _model()
    _fill(source, 4.0)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    layer = torch.nn.Linear(4, 2)
    tpt.load_state_dict(layer, path, prefix="model.2")
    assert bool((layer.weight == 4.0).all())
    with pytest.raises(InvalidArgumentError, match=r"no object at 'model\.9'"):
        tpt.load_state_dict(layer, path, prefix="model.9")


def _headed(classes: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, classes))


def test_strict_refuses_every_dtype_and_shape_mismatch_by_name_before_changing_anything(tmp_path) -> None:
    path = tpt.Checkpoint(model=_headed(2)).write(str(tmp_path / "ckpt"))
    target = _headed(5)
    target[0].double()
    _fill(target, 7.0)
    with pytest.raises(InvalidArgumentError) as caught:
        tpt.load_state_dict(target, path)
    message = str(caught.value)
    assert "2.weight: float32[5, 4] here, float32[2, 4] in the checkpoint" in message
    assert "2.bias: float32[5] here, float32[2] in the checkpoint" in message
    assert "0.weight: float64[4, 3] here, float32[4, 3] in the checkpoint" in message
    assert all(bool((v == 7.0).all()) for v in target.state_dict().values())


def test_non_strict_loads_the_matching_names_and_returns_the_mismatched_ones(tmp_path) -> None:
    """A new head: torch raises on its shape even with strict=False; here the backbone loads."""
    source = _headed(2)
    _fill(source, 3.0)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = _headed(5)
    _fill(target, 7.0)
    keys = tpt.load_state_dict(target, path, strict=False)
    assert keys == tpt.IncompatibleKeys([], [], ["2.bias", "2.weight"])
    assert bool((target[0].weight == 3.0).all()) and bool((target[1].running_var == 3.0).all())
    assert bool((target[2].weight == 7.0).all())  # left as it was


def test_a_tied_weight_loads_under_both_names_and_extra_state_and_lazy_tensors_load(tmp_path) -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight
            self.lazy = torch.nn.LazyLinear(2)
            self.vocab = ["a"]

        def get_extra_state(self):
            return {"vocab": self.vocab}

        def set_extra_state(self, state):
            self.vocab = state["vocab"]

    source = Tied()
    source.lazy(torch.randn(1, 3))
    _fill(source, 6.0)
    source.vocab = ["x", "y"]
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = Tied()
    assert tpt.load_state_dict(target, path) == tpt.IncompatibleKeys([], [], [])
    assert target.head.weight is target.embed.weight and bool((target.embed.weight == 6.0).all())
    assert target.vocab == ["x", "y"]
    assert target.lazy.weight.shape == (2, 3) and bool((target.lazy.weight == 6.0).all())


@pytest.fixture
def process_group(tmp_path):
    """A real one-process gloo group, as torchrun would make with a world of one."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_ddp_trained_checkpoint_loads_into_a_plain_model_and_back(tmp_path, process_group) -> None:
    ddp = torch.nn.parallel.DistributedDataParallel(_model())
    _fill(ddp.module, 5.0)
    path = tpt.Checkpoint(model=ddp).write(str(tmp_path / "ddp"))
    assert not any("module/" in key for key, _ in tp.list_variables(path))
    plain = _model()
    tpt.load_state_dict(plain, path)
    assert bool((plain[2].bias == 5.0).all())
    back = torch.nn.parallel.DistributedDataParallel(_model())
    tpt.load_state_dict(back, tpt.Checkpoint(model=plain).write(str(tmp_path / "plain")))
    assert bool((back.module[0].weight == 5.0).all())
