"""Tensors on the ``meta`` device hold no values: a save of one and a restore into one are refused,
naming the tensor and how to give it memory, and change nothing (issue 38)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import trackpoint.torch as tpt
from trackpoint.errors import InvalidArgumentError


def _on_meta() -> torch.nn.Module:
    """A model whose encoder was built on the meta device, as large models are before loading."""
    model = torch.nn.Module()
    model.head = torch.nn.Linear(2, 2)
    with torch.device("meta"):
        model.encoder = torch.nn.Linear(2, 3)
    return model


def test_saving_meta_parameters_is_refused_naming_them_and_writes_nothing(tmp_path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"model\.encoder\.weight.* meta device.*to_empty") as caught:
        tpt.Checkpoint(model=_on_meta()).write(str(tmp_path / "ckpt"))
    assert "share memory" not in str(caught.value)
    assert not os.listdir(tmp_path)


def test_saving_a_lone_meta_buffer_is_refused_naming_it(tmp_path) -> None:
    model = torch.nn.Module()
    model.register_buffer("table", torch.empty(4, device="meta"))
    with pytest.raises(InvalidArgumentError, match=r"model\.table.* meta device.*to_empty"):
        tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    assert not os.listdir(tmp_path)


def test_saving_meta_state_of_a_state_dict_object_is_refused_naming_it(tmp_path) -> None:
    class Holder:
        def state_dict(self) -> dict[str, torch.Tensor]:
            return {"t": torch.empty(2, device="meta")}

        def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
            pass

    with pytest.raises(InvalidArgumentError, match=r"holder\.state_dict\(\) tensor 0.* meta device"):
        tpt.Checkpoint(holder=Holder()).write(str(tmp_path / "ckpt"))


def test_restoring_into_meta_tensors_is_refused_naming_them_and_changes_nothing(tmp_path) -> None:
    source = _on_meta()
    source.encoder = torch.nn.Linear(2, 3)  # real weights to save
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = _on_meta()
    head = target.head.weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "copying ... to a meta parameter is a no-op" would be one
        with pytest.raises(InvalidArgumentError, match=r"model\.encoder\.weight.* meta device.*to_empty"):
            tpt.Checkpoint(model=target).read(path)
    assert torch.equal(target.head.weight, head)  # all or nothing


@pytest.mark.parametrize("strict", [True, False])
def test_load_state_dict_into_meta_tensors_is_refused_naming_their_keys(tmp_path, strict) -> None:
    source = _on_meta()
    source.encoder = torch.nn.Linear(2, 3)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = _on_meta()
    head = target.head.weight.detach().clone()
    with pytest.raises(InvalidArgumentError) as caught:
        tpt.load_state_dict(target, path, strict=strict)
    message = str(caught.value)
    assert "encoder.bias, encoder.weight" in message and "meta device" in message and "to_empty" in message
    assert "head.weight" not in message
    assert torch.equal(target.head.weight, head)
    # Once materialized, the same load goes through.
    target.encoder.to_empty(device="cpu")
    assert tpt.load_state_dict(target, path, strict=strict) == tpt.IncompatibleKeys([], [], [])
    assert torch.equal(target.encoder.weight, source.encoder.weight)
