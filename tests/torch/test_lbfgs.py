"""Optimizer state that is not one tensor per parameter: LBFGS keeps its history (lists of
tensors, floats, counts) in the state of its first parameter; a restore resumes it exactly (issue 38)."""

from __future__ import annotations

import pytest
import torch

import trackpoint as tp
import trackpoint.torch as tpt
from trackpoint.errors import InvalidArgumentError


def _model(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))


def _lbfgs(model: torch.nn.Module, line_search: str | None) -> torch.optim.LBFGS:
    # A history shorter than the iterations run, so that it is full and has been trimmed.
    return torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=3, line_search_fn=line_search)


def _steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: list[tuple[torch.Tensor, ...]]) -> None:
    for x, y in batches:

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            optimizer.zero_grad()
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            return loss

        optimizer.step(closure)


def _batches(n: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator)) for _ in range(n)]


def _copy(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return value.clone()
    return [_copy(item) for item in value] if isinstance(value, list) else value


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
@pytest.mark.parametrize("target", ["fresh", "stepped"])
def test_lbfgs_resumed_in_other_objects_steps_as_the_uninterrupted_run(tmp_path, line_search, target) -> None:
    batches = _batches(5, seed=1)
    model = _model(0)
    optimizer = _lbfgs(model, line_search)
    _steps(model, optimizer, batches[:3])
    history = optimizer.state[model[0].weight]
    assert len(history["old_dirs"]) == 3 and isinstance(history["prev_loss"], float)
    manager = tp.CheckpointManager(tpt.Checkpoint(model=model, optimizer=optimizer), str(tmp_path), max_to_keep=1)
    manager.save()
    saved = {key: _copy(value) for key, value in history.items()}  # LBFGS changes its lists in place
    _steps(model, optimizer, batches[3:])

    other = _model(99)
    other_optimizer = _lbfgs(other, line_search)
    if target == "stepped":  # a history of its own, of another length, to be replaced
        _steps(other, other_optimizer, _batches(1, seed=7))
    status = tpt.Checkpoint(model=other, optimizer=other_optimizer).restore(tp.latest_checkpoint(str(tmp_path)))
    status.assert_consumed()
    restored = other_optimizer.state[other[0].weight]
    assert sorted(restored) == sorted(saved)
    for key in ("func_evals", "n_iter", "prev_loss"):
        assert restored[key] == saved[key], key
    for key in ("old_dirs", "old_stps", "ro"):
        assert len(restored[key]) == len(saved[key]), key
        assert all(torch.equal(a, b) for a, b in zip(restored[key], saved[key])), key
    _steps(other, other_optimizer, batches[3:])
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a, b)


def test_optimizer_state_that_cannot_be_stored_names_the_key_and_the_parameter(tmp_path) -> None:
    model = _model(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _steps(model, optimizer, _batches(1, seed=2))
    optimizer.state[model[2].bias]["note"] = object()
    with pytest.raises(InvalidArgumentError, match=r"'model\.2\.bias'\]\['note'\] is a object.*never pickles"):
        tpt.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))
