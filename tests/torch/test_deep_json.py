"""State kept as JSON (a scheduler's, an optimizer's hyperparameters, a module's extra state, the
RNG's) nested beyond ``MAX_JSON_DEPTH``: refused on save and on restore with an error naming the
checkpoint and the key, never ``RecursionError``."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch

import trackpoint as tp
import trackpoint.torch as tpt
from tests.torch.test_modules import WithExtra
from trackpoint._format.bounded_json import MAX_JSON_DEPTH
from trackpoint.errors import InvalidArgumentError


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _training(extra: object = None) -> dict[str, Any]:
    torch.manual_seed(0)
    model = WithExtra(extra if extra is not None else {"vocab": ["a"]})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 3, 0.5)
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler, "rng": tpt.RNGState()}


def _deep_scheduler(objects: dict[str, Any], value: object) -> None:
    objects["scheduler"].extra = value  # a scheduler's state_dict() is its __dict__ but the optimizer


def _deep_hyperparameter(objects: dict[str, Any], value: object) -> None:
    objects["optimizer"].param_groups[0]["schedule"] = value


def _deep_extra_state(objects: dict[str, Any], value: object) -> None:
    objects["model"].extra = value


_DEEP = {
    "scheduler": (_deep_scheduler, "scheduler"),
    "optimizer": (_deep_hyperparameter, "optimizer"),
    "extra state": (_deep_extra_state, "model/_extra_state"),
}


def _cycle() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.slow  # 100,000-deep values: about a second
@pytest.mark.parametrize("make", [lambda: _nested(100_000), _cycle], ids=["100000-deep", "contains-itself"])
@pytest.mark.parametrize("where", sorted(_DEEP))
def test_saving_too_deep_a_state_names_the_checkpoint_and_the_object(tmp_path, where: str, make) -> None:
    objects = _training()
    change, path = _DEEP[where]
    change(objects, make())
    prefix = str(tmp_path / "ckpt")
    with pytest.raises(InvalidArgumentError, match=f"more than {MAX_JSON_DEPTH} levels deep") as caught:
        tpt.Checkpoint(**objects).write(prefix)
    assert caught.value.path == prefix and prefix in str(caught.value)
    assert caught.value.key == path and path in str(caught.value)
    assert not list(tmp_path.iterdir())


def test_a_deep_state_within_the_bound_round_trips(tmp_path) -> None:
    objects = _training(extra={"deep": _nested(MAX_JSON_DEPTH - 1)})  # the dict around it is one more level
    prefix = tpt.Checkpoint(**objects).write(str(tmp_path / "ckpt"))
    fresh = _training()
    tpt.Checkpoint(**fresh).read(prefix).assert_consumed()
    assert fresh["model"].extra == {"deep": _nested(MAX_JSON_DEPTH - 1)}


@pytest.mark.slow  # 100,000-deep values saved twice: about a second
def test_a_second_save_reusing_its_layout_names_them_too(tmp_path) -> None:
    objects = _training()
    checkpoint = tpt.Checkpoint(**objects)
    checkpoint.write(str(tmp_path / "first"))
    objects["scheduler"].extra = _nested(100_000)
    with pytest.raises(InvalidArgumentError, match=f"more than {MAX_JSON_DEPTH} levels deep") as caught:
        checkpoint.write(str(tmp_path / "second"))
    assert caught.value.path == str(tmp_path / "second") and "scheduler" in str(caught.value.key)


def _overwritten(prefix: str, key: str, value: bytes, dst: str) -> str:
    """A copy of the checkpoint ``prefix`` with the string tensor ``key`` holding ``value``."""
    with tp.load_checkpoint(prefix) as reader:
        keys = sorted(reader.get_variable_to_shape_map())
        assert key in keys, keys
        tensors = {k: (value if k == key else reader.get_tensor(k)) for k in keys}
    return tp.save_tensors(dst, tensors)


_STORED = {
    "scheduler": "scheduler/.ATTRIBUTES/py_state",
    "optimizer": "optimizer/.ATTRIBUTES/py_state",
    "extra state": "model/_extra_state/.ATTRIBUTES/py_state",
    "rng": "rng/.ATTRIBUTES/py_state",
}


@pytest.mark.parametrize("hostile", [b"[" * 100_000, b'{"a": ' * 100_000], ids=["arrays", "objects"])
@pytest.mark.parametrize("where", sorted(_STORED))
def test_restoring_a_hostile_file_names_the_checkpoint_and_the_key(tmp_path, where: str, hostile: bytes) -> None:
    prefix = tpt.Checkpoint(**_training()).write(str(tmp_path / "legit"))
    key = _STORED[where]
    crafted = _overwritten(prefix, key, hostile, str(tmp_path / "crafted"))
    fresh = _training(extra={"untouched": True})
    weight = fresh["model"].linear.weight.detach().clone()
    random.seed(5)
    with pytest.raises(InvalidArgumentError, match=f"more than {MAX_JSON_DEPTH} levels deep") as caught:
        tpt.Checkpoint(**fresh).read(crafted)
    assert caught.value.path == crafted and crafted in str(caught.value)
    assert caught.value.key is not None and key in caught.value.key and key in str(caught.value)
    # All or nothing: no object took a value.
    assert torch.equal(fresh["model"].linear.weight, weight) and fresh["model"].extra == {"untouched": True}
    assert random.random() == random.Random(5).random()


def test_a_legit_deep_string_is_not_mistaken_for_nesting(tmp_path) -> None:
    text = "[" * 10_000 + '\\"{' * 1000  # brackets, quotes and backslashes inside strings do not nest
    objects = _training(extra={"text": text, "pairs": [["[", "\\"]] * 3})
    prefix = tpt.Checkpoint(**objects).write(str(tmp_path / "ckpt"))
    fresh = _training()
    tpt.Checkpoint(**fresh).read(prefix).assert_consumed()
    assert fresh["model"].extra == {"text": text, "pairs": [["[", "\\"]] * 3}
    np.testing.assert_array_equal(fresh["model"].linear.weight.detach(), objects["model"].linear.weight.detach())
