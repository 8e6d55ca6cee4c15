"""trackpoint.torch optimizers, schedulers, GradScaler, RNG: state by parameter path, resume bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import trackpoint as tp
import trackpoint.torch as tpt
from trackpoint.errors import InvalidArgumentError


def _model(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _train(model, optimizer, scheduler, batches) -> None:
    for x in batches:
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def _batches(n: int, seed: int = 1) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(16, 4, generator=generator) for _ in range(n)]


OPTIMIZERS = {
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01),
    "SGD-momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=0.01),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
}


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_resuming_in_fresh_objects_equals_an_uninterrupted_run_bit_for_bit(tmp_path, make) -> None:
    batches = _batches(8)
    model = _model()
    optimizer = make(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 3, 0.5)
    _train(model, optimizer, scheduler, batches[:4])
    manager = tp.CheckpointManager(
        tpt.Checkpoint(model=model, optimizer=optimizer, scheduler=scheduler), str(tmp_path), max_to_keep=2
    )
    manager.save()
    _train(model, optimizer, scheduler, batches[4:])

    fresh = _model(seed=99)  # other initial values
    fresh_optimizer = make(fresh.parameters())
    fresh_scheduler = torch.optim.lr_scheduler.StepLR(fresh_optimizer, 3, 0.5)
    ckpt = tpt.Checkpoint(model=fresh, optimizer=fresh_optimizer, scheduler=fresh_scheduler)
    ckpt.restore(tp.latest_checkpoint(str(tmp_path))).assert_consumed()
    # The optimizer state is in place before any step: none was run to create it.
    assert all(len(fresh_optimizer.state[p]) for p in fresh.parameters())
    _train(fresh, fresh_optimizer, fresh_scheduler, batches[4:])
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)
    assert fresh_scheduler.state_dict() == scheduler.state_dict()


def test_optimizer_state_is_stored_as_slots_of_each_parameter(tmp_path) -> None:
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters())
    _train(model, optimizer, None, _batches(1))
    path = tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))
    keys = {k for k, _ in tp.list_variables(path)}
    for slot in ("exp_avg", "exp_avg_sq", "step"):
        assert f"model/0/weight/.OPTIMIZER_SLOT/optimizer/{slot}/.ATTRIBUTES/VARIABLE_VALUE" in keys
    np.testing.assert_array_equal(
        tp.load_variable(path, "model/2/bias/.OPTIMIZER_SLOT/optimizer/exp_avg/.ATTRIBUTES/VARIABLE_VALUE"),
        optimizer.state[model[2].bias]["exp_avg"].numpy(),
    )


def test_the_bulk_slot_scan_gives_the_files_the_per_slot_scan_gives(tmp_path, monkeypatch) -> None:
    from trackpoint.torch._optimizer import OptimizerNode

    model = _model()
    optimizer = torch.optim.AdamW([*model[0].parameters(), model[2].weight])  # one without state
    _train(model, optimizer, None, _batches(1))
    calls = []
    bulk = OptimizerNode._tp_slots_of
    monkeypatch.setattr(OptimizerNode, "_tp_slots_of", lambda self, objects: calls.append(1) or bulk(self, objects))
    fast = tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "fast" / "ckpt"))
    assert calls  # the save took the bulk scan
    monkeypatch.delattr(OptimizerNode, "_tp_slots_of")
    tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "slow" / "ckpt"))
    for suffix in (".index", ".data-00000-of-00001"):
        assert (tmp_path / "fast" / f"ckpt{suffix}").read_bytes() == (tmp_path / "slow" / f"ckpt{suffix}").read_bytes()
    assert not any("2/bias/.OPTIMIZER_SLOT" in key for key, _ in tp.list_variables(fast))


def test_optimizer_state_follows_the_parameters_when_the_model_changes(tmp_path) -> None:
    """torch keys optimizer state by index: a layer added in front shifts every index. By path it does not."""
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters())
    _train(model, optimizer, None, _batches(2))
    path = tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))

    grown = torch.nn.Sequential()
    grown.add_module("pre", torch.nn.Linear(4, 4))  # new, first in parameter order
    for name, layer in _model(seed=5).named_children():
        grown.add_module(name, layer)
    grown_optimizer = torch.optim.AdamW(grown.parameters())
    tpt.Checkpoint(model=grown, optimizer=grown_optimizer).read(path).expect_partial()
    assert not grown_optimizer.state.get(grown.pre.weight)  # nothing was saved for it
    for name in ("0", "2"):
        for kind in ("weight", "bias"):
            old = optimizer.state[getattr(model[int(name)], kind)]
            new = grown_optimizer.state[getattr(getattr(grown, name), kind)]
            assert torch.equal(new["exp_avg"], old["exp_avg"])
            assert torch.equal(new["step"], old["step"])


def test_a_param_group_added_after_a_restore_takes_its_state_at_the_next(tmp_path) -> None:
    """Each parameter's group is looked up by a noted index; a group added later is found too."""
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters())
    _train(model, optimizer, None, _batches(2))
    path = tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))

    fresh = _model(seed=5)
    fresh_optimizer = torch.optim.AdamW(fresh[0].parameters())
    ckpt = tpt.Checkpoint(model=fresh, optimizer=fresh_optimizer)
    ckpt.read(path).expect_partial()
    assert not fresh_optimizer.state.get(fresh[2].weight)  # not the optimizer's parameter yet
    fresh_optimizer.add_param_group({"params": list(fresh[2].parameters())})
    ckpt.read(path).assert_consumed()
    for layer in (0, 2):
        assert torch.equal(
            fresh_optimizer.state[fresh[layer].weight]["exp_avg"], optimizer.state[model[layer].weight]["exp_avg"]
        )


def test_param_group_hyperparameters_are_kept_by_parameter_path(tmp_path) -> None:
    model = _model()
    optimizer = torch.optim.SGD(
        [{"params": model[0].parameters(), "lr": 0.1}, {"params": model[2].parameters(), "lr": 0.2, "momentum": 0.5}],
        lr=0.3,
    )
    path = tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))
    # The groups in the other order, with other values: each takes what its parameters had.
    fresh = _model()
    swapped = torch.optim.SGD([{"params": fresh[2].parameters()}, {"params": fresh[0].parameters()}], lr=0.9)
    tpt.Checkpoint(model=fresh, optimizer=swapped).read(path).assert_consumed()
    assert swapped.param_groups[0]["lr"] == 0.2 and swapped.param_groups[0]["momentum"] == 0.5
    assert swapped.param_groups[1]["lr"] == 0.1 and swapped.param_groups[1]["momentum"] == 0


def test_an_optimizer_parameter_outside_the_checkpointed_modules_is_an_error(tmp_path) -> None:
    model = _model()
    stray = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([*model.parameters(), stray], lr=0.1)
    with pytest.raises(InvalidArgumentError, match=r"optimizer 'optimizer'.*shape \[3\].*in no module"):
        tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))


def test_scheduler_state_that_is_not_json_is_refused(tmp_path) -> None:
    class Odd:
        def state_dict(self):
            return {"when": object()}

        def load_state_dict(self, state):
            pass

    with pytest.raises(InvalidArgumentError, match=r"odd\.state_dict\(\)\['when'\] is a object.*never pickles"):
        tpt.Checkpoint(odd=Odd()).write(str(tmp_path / "ckpt"))


def test_state_dict_objects_keep_tensors_tuples_and_int_keys(tmp_path) -> None:
    class Holder:
        def __init__(self, state):
            self.state = state

        def state_dict(self):
            return self.state

        def load_state_dict(self, state):
            self.state = state

    state = {"t": torch.arange(4.0), "pair": (1, 2.5), "by_int": {3: "x"}, "inf": float("inf"), "n": None}
    path = tpt.Checkpoint(holder=Holder(state)).write(str(tmp_path / "ckpt"))
    back = Holder({})
    tpt.Checkpoint(holder=back).read(path).assert_consumed()
    assert torch.equal(back.state["t"], state["t"])
    assert back.state["pair"] == (1, 2.5) and back.state["by_int"] == {3: "x"}
    assert back.state["inf"] == float("inf") and back.state["n"] is None


def test_grad_scaler_state_round_trips(tmp_path) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    path = tpt.Checkpoint(scaler=scaler).write(str(tmp_path / "ckpt"))
    fresh = torch.amp.GradScaler("cpu")
    tpt.Checkpoint(scaler=fresh).read(path).assert_consumed()
    assert fresh.state_dict() == scaler.state_dict()


def test_rng_state_puts_back_torch_numpy_and_python_generators(tmp_path) -> None:
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    path = tpt.Checkpoint(rng=tpt.RNGState()).write(str(tmp_path / "ckpt"))
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(4)
    np.random.seed(4)
    random.seed(4)
    tpt.Checkpoint(rng=tpt.RNGState()).read(path).assert_consumed()
    assert torch.equal(torch.rand(3), expected[0])
    np.testing.assert_array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]


@pytest.mark.parametrize("damage", ["python state", "no torch state"])
def test_a_damaged_rng_state_is_refused_and_changes_no_generator(tmp_path, damage) -> None:
    class Broken(tpt.RNGState):
        def _serialize_to_tensors(self):
            tensors = super()._serialize_to_tensors()
            if damage == "python state":
                tensors["py_state"] = b'{"numpy": [1]}'
            else:
                del tensors["torch"]
            return tensors

    path = tpt.Checkpoint(rng=Broken()).write(str(tmp_path / "ckpt"))
    random.seed(11)
    expected = random.random()
    random.seed(11)
    with pytest.raises(InvalidArgumentError, match=r"rng.*not what RNGState saves"):
        tpt.Checkpoint(rng=tpt.RNGState()).read(path)
    assert random.random() == expected


def test_a_state_dict_object_refusing_its_state_leaves_the_model_as_it_was(tmp_path) -> None:
    class Picky:
        def __init__(self, keys):
            self.keys = keys

        def state_dict(self):
            return {key: 1 for key in self.keys}

        def load_state_dict(self, state):
            if set(state) != set(self.keys):
                raise KeyError(f"expected {self.keys}")

    model = _model()
    path = tpt.Checkpoint(model=model, picky=Picky(["a"])).write(str(tmp_path / "ckpt"))
    other = _model(seed=7)
    before = [p.detach().clone() for p in other.parameters()]
    with pytest.raises(InvalidArgumentError, match=r"picky: Picky\.load_state_dict refused the stored state"):
        tpt.Checkpoint(model=other, picky=Picky(["b"])).read(path)
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters()))
