"""tp.split_dependency: components checkpoint like variables, in both directions."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import HasVariables, SaveTensorSlicesAsDeps


def test_split_saves_like_variables_and_restores_into_plain_variables(tmp_path) -> None:
    source = SaveTensorSlicesAsDeps()
    source.combined = tp.NoDependency(np.array([1, 2, 3, 4], np.float32))
    path = tp.Checkpoint(obj=source).write(str(tmp_path / "c"))
    assert [k for k, _ in tp.list_variables(path)] == [
        "_CHECKPOINTABLE_OBJECT_GRAPH",
        "obj/first_half/.ATTRIBUTES/VARIABLE_VALUE",
        "obj/second_half/.ATTRIBUTES/VARIABLE_VALUE",
    ]
    target = HasVariables()
    tp.Checkpoint(obj=target).read(path).assert_consumed()
    assert target.first_half.numpy().tolist() == [1, 2] and target.second_half.numpy().tolist() == [3, 4]


def test_separate_variables_restore_into_split_object(tmp_path) -> None:
    source = HasVariables()
    source.first_half.assign([5.0, 6.0])
    source.second_half.assign([7.0, 8.0])
    path = tp.Checkpoint(obj=source).write(str(tmp_path / "c"))
    target = SaveTensorSlicesAsDeps()
    tp.Checkpoint(obj=target).read(path).assert_consumed()
    assert target.combined.tolist() == [5, 6, 7, 8] and len(target.restored) == 1


def test_restore_on_create_completes_when_the_last_component_is_tracked(tmp_path) -> None:
    source = SaveTensorSlicesAsDeps()
    source.combined = tp.NoDependency(np.array([1, 2, 3, 4], np.float32))
    path = tp.Checkpoint(obj=source).write(str(tmp_path / "c"))
    target = SaveTensorSlicesAsDeps(track=False)
    status = tp.Checkpoint(obj=target).read(path)
    target._track_trackable(target.deps["first_half"], "first_half")
    assert target.restored == []  # waits for its partner
    target._track_trackable(target.deps["second_half"], "second_half")
    assert target.combined.tolist() == [1, 2, 3, 4]
    status.assert_consumed()


def test_restoring_into_only_some_components_fails_assert_consumed(tmp_path) -> None:
    path = tp.Checkpoint(obj=SaveTensorSlicesAsDeps()).write(str(tmp_path / "c"))
    partial = tp.Module()
    partial.first_half = tp.Variable([0.0, 0.0])
    status = tp.Checkpoint(obj=partial).read(path)
    with pytest.raises(AssertionError, match="second_half"):
        status.assert_consumed()
    status.expect_partial()


def test_saving_one_component_without_the_others_fails(tmp_path) -> None:
    obj = SaveTensorSlicesAsDeps(track=False)
    obj._track_trackable(obj.deps["first_half"], "first_half")
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"\['second_half'\] were not saved"):
        tp.Checkpoint(obj=obj).write(str(tmp_path / "c"))
    obj.track_all()
    tp.Checkpoint(obj=obj).write(str(tmp_path / "c"))  # the failed save left nothing behind in the buffer


def test_fill_function_omitting_a_name_fails(tmp_path) -> None:
    obj = SaveTensorSlicesAsDeps(fill_names=("first_half", "wrong"))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"did not provide components \['second_half'\]"):
        tp.Checkpoint(obj=obj).write(str(tmp_path / "c"))


def test_restoring_a_component_twice_before_the_set_is_complete_fails() -> None:
    obj = SaveTensorSlicesAsDeps()
    obj.deps["first_half"]._restore_from_tensors({"VARIABLE_VALUE": np.zeros(2, np.float32)})
    with pytest.raises(tp.errors.InvalidArgumentError, match="restored twice"):
        obj.deps["first_half"]._restore_from_tensors({"VARIABLE_VALUE": np.zeros(2, np.float32)})


def test_dtypes_enforced_on_save_and_restore(tmp_path) -> None:
    obj = SaveTensorSlicesAsDeps()
    obj.combined = tp.NoDependency(np.zeros(4, np.float64))
    with pytest.raises(tp.errors.InvalidArgumentError, match="got float64, declared float32"):
        tp.Checkpoint(obj=obj).write(str(tmp_path / "c"))
    source = tp.Module()
    source.first_half = tp.Variable([1, 2])
    source.second_half = tp.Variable([3, 4])
    path = tp.Checkpoint(obj=source).write(str(tmp_path / "ints"))
    with pytest.raises(tp.errors.InvalidArgumentError, match="int32, declared float32"):
        tp.Checkpoint(obj=SaveTensorSlicesAsDeps()).read(path)


def test_arguments_are_validated() -> None:
    noop = lambda *_: None
    with pytest.raises(ValueError, match="one dtype per component"):
        tp.split_dependency(["a", "b"], [np.float32], noop, noop)
    with pytest.raises(ValueError, match="repeat"):
        tp.split_dependency(["a", "a"], [np.float32] * 2, noop, noop)
    with pytest.raises(ValueError):
        tp.split_dependency(["a"], [np.float32], noop, noop, device="bogus:1")
    assert set(tp.split_dependency(["a"], [np.float32], noop, noop, device="/job:localhost/device:CPU:0")) == {"a"}
