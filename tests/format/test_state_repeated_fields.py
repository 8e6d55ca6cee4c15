"""The state file's repeated fields compare equal to lists, as protobuf repeated fields do."""

from __future__ import annotations

import os

import numpy as np

import trackpoint as tp
from trackpoint._format.state_file import CheckpointState, write_state


def test_paths_and_timestamps_equal_lists_and_tuples(tmp_path) -> None:
    directory = str(tmp_path)
    paths = [os.path.join(directory, "ckpt-1"), os.path.join(directory, "ckpt-2")]
    write_state(directory, paths[-1], paths, [10.5, 20.25], 5.0)
    state = tp.get_checkpoint_state(directory)
    assert state.all_model_checkpoint_paths == paths
    assert paths == state.all_model_checkpoint_paths
    assert state.all_model_checkpoint_paths == tuple(paths)
    assert (state.all_model_checkpoint_paths != paths) is False
    assert state.all_model_checkpoint_paths != paths[:1]
    assert state.all_model_checkpoint_timestamps == [10.5, 20.25]
    assert state.all_model_checkpoint_timestamps != [10.5]
    assert state.last_preserved_timestamp == 5.0


def test_empty_fields_equal_empty_lists_and_other_types_stay_unequal(tmp_path) -> None:
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    state = tp.get_checkpoint_state(str(tmp_path))
    assert state.all_model_checkpoint_paths == [] and state.all_model_checkpoint_timestamps == []
    assert state.all_model_checkpoint_paths != "" and state.all_model_checkpoint_paths != 0
    from trackpoint._format.state_file import RepeatedField

    assert (RepeatedField([1.0, 2.0]) == np.array([1.0, 2.0])).all()  # element-wise, as protobuf's


def test_a_state_made_directly_from_lists_compares_the_same_and_stays_hashable() -> None:
    made = CheckpointState("a", ["a"], [1.0], 0.5)
    assert made == CheckpointState("a", ("a",), (1.0,), 0.5)
    assert hash(made) == hash(CheckpointState("a", ("a",), (1.0,), 0.5))
    assert isinstance(made.all_model_checkpoint_paths, tuple)
    assert made.all_model_checkpoint_paths == ["a"]


def test_manager_checkpoints_read_back_as_lists(tmp_path) -> None:
    manager = tp.CheckpointManager(tp.Checkpoint(v=tp.Variable(1.0)), str(tmp_path), max_to_keep=2)
    for _ in range(3):
        manager.save()
    assert tp.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == manager.checkpoints
