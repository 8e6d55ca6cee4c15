"""The TensorOwner protocol: owners check all values before any takes one; large values land in their memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.errors import InvalidArgumentError

MiB = 1 << 20


class Buffer(tp.Trackable):
    """Keeps its value in an array of its own, which it offers to restores."""

    def __init__(self, value: np.ndarray, offer: bool = True) -> None:
        self.value = value
        self.offer = offer
        self.checked = 0

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return ("VARIABLE_VALUE",)

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {"VARIABLE_VALUE": self.value}

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {"VARIABLE_VALUE": self.value} if self.offer else {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> np.ndarray:
        self.checked += 1
        array = np.asarray(tensors["VARIABLE_VALUE"])
        if array.shape != self.value.shape:
            raise InvalidArgumentError(f"shape {array.shape} is not {self.value.shape}")
        return array

    def _tp_take_restored(self, checked: np.ndarray) -> None:
        if checked is not self.value:
            self.value[...] = checked

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        raise AssertionError("a tensor owner is restored through the protocol")


def test_a_large_value_is_read_into_the_memory_its_owner_offered(tmp_path) -> None:
    owner = Buffer(np.arange(MiB, dtype=np.float32))  # 4 MiB: read in place
    path = tp.Checkpoint(b=owner).write(str(tmp_path / "ckpt"))
    memory = owner.value
    memory[...] = 0
    tp.Checkpoint(b=owner).read(path).assert_consumed()
    assert owner.value is memory
    np.testing.assert_array_equal(memory, np.arange(MiB, dtype=np.float32))


def test_a_small_value_is_copied_into_the_owner_by_its_take(tmp_path) -> None:
    owner = Buffer(np.arange(10, dtype=np.float32))
    path = tp.Checkpoint(b=owner).write(str(tmp_path / "ckpt"))
    owner.value[...] = 0
    tp.Checkpoint(b=owner).read(path).assert_consumed()
    np.testing.assert_array_equal(owner.value, np.arange(10, dtype=np.float32))


@pytest.mark.parametrize("size", [10, MiB])
def test_one_owner_refusing_leaves_every_owner_and_variable_as_it_was(tmp_path, size) -> None:
    first, second = Buffer(np.full(size, 1.0, np.float32)), Buffer(np.full(4, 2.0, np.float32))
    variable = tp.Variable(np.full(3, 3.0, np.float32))
    path = tp.Checkpoint(a=first, b=second, v=variable).write(str(tmp_path / "ckpt"))
    first.value[...] = -1
    variable.assign(np.full(3, -1.0, np.float32))
    wrong = Buffer(np.zeros(5, np.float32))  # refuses the stored 4 values
    with pytest.raises(InvalidArgumentError, match=r"into \(root\)\.b: shape \(4,\) is not \(5,\)"):
        tp.Checkpoint(a=first, b=wrong, v=variable).read(path)
    assert (first.value == -1).all()  # checked, never taken: the restore is all or nothing
    assert (variable.numpy() == -1).all()


def test_restore_from_tensors_of_a_tensor_owner_checks_then_takes() -> None:
    class Plain(Buffer):
        _restore_from_tensors = tp.Trackable._restore_from_tensors  # the base's, not Buffer's guard

    owner = Plain(np.zeros(3, np.float32))
    owner._restore_from_tensors({"VARIABLE_VALUE": np.ones(3, np.float32)})
    assert owner.checked == 1 and (owner.value == 1).all()
    with pytest.raises(InvalidArgumentError, match="shape"):
        owner._restore_from_tensors({"VARIABLE_VALUE": np.ones(4, np.float32)})


def test_an_owner_with_a_variable_value_saves_the_same_files_as_through_serialize_to_tensors(tmp_path) -> None:
    class Single(Buffer):
        asked = 0

        def _tp_variable_value(self) -> np.ndarray:
            return self.value

        def _serialize_to_tensors(self) -> dict[str, Any]:
            Single.asked += 1
            return super()._serialize_to_tensors()

        def _checkpoint_full_name(self) -> str:
            return "single"

    class General(Buffer):
        def _checkpoint_full_name(self) -> str:
            return "single"

    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    fast = tp.Checkpoint(m=tp.Module(), w=Single(value.copy())).write(str(tmp_path / "fast" / "ckpt"))
    general = tp.Checkpoint(m=tp.Module(), w=General(value.copy())).write(str(tmp_path / "general" / "ckpt"))
    assert Single.asked == 0  # the save took the variable's path
    for suffix in (".index", ".data-00000-of-00001"):
        assert Path(fast + suffix).read_bytes() == Path(general + suffix).read_bytes()
    assert tp.list_variables(fast)[-1][0] == "w/.ATTRIBUTES/VARIABLE_VALUE"


def test_a_variable_subclass_that_overrides_its_name_or_value_is_saved_through_its_methods(tmp_path) -> None:
    """``tp.Variable`` names the attributes a save may read for its full name and value
    (``_tp_value_fields``); a subclass overriding either method is saved through the methods, on
    the first save and on a later one that reuses the layout."""

    class Renamed(tp.Variable):
        def _checkpoint_full_name(self) -> str:
            return "renamed"

    class Doubled(tp.Variable):
        def _tp_variable_value(self) -> Any:
            return self._value * 2

    value = np.arange(6, dtype=np.float32)
    ours = tp.Checkpoint(w=Renamed(value, name="original")).write(str(tmp_path / "ours" / "ckpt"))
    plain = tp.Checkpoint(w=tp.Variable(value, name="renamed")).write(str(tmp_path / "plain" / "ckpt"))
    for suffix in (".index", ".data-00000-of-00001"):
        assert Path(ours + suffix).read_bytes() == Path(plain + suffix).read_bytes()

    ckpt = tp.Checkpoint(w=Doubled(value))
    for name in ("first", "second"):  # the second save reuses the first's layout
        prefix = ckpt.write(str(tmp_path / name))
        np.testing.assert_array_equal(tp.load_variable(prefix, "w/.ATTRIBUTES/VARIABLE_VALUE"), value * 2)
