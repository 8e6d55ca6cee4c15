"""get_checkpoint_state's repeated fields compare as TensorFlow 2.21's protobuf fields do."""

from __future__ import annotations

import pytest

import trackpoint as tp
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_state = tf_side("state_fields")


def test_repeated_fields_equal_lists_as_tf_does(tmp_path) -> None:
    directory = str(tmp_path)
    manager = tp.CheckpointManager(tp.Checkpoint(v=tp.Variable(1.0)), directory, max_to_keep=3)
    for _ in range(2):
        manager.save()
    theirs, ours = tf_state.repeated_fields(directory), tp.get_checkpoint_state(directory)
    paths, stamps = theirs["all_model_checkpoint_paths"], theirs["all_model_checkpoint_timestamps"]
    cases = [
        (field, other)
        for field, value in (("all_model_checkpoint_paths", paths), ("all_model_checkpoint_timestamps", stamps))
        for other in (value, value[:1], [], [*value, value[0]])
    ]
    # TF's answers, computed on its own state object (a protobuf message) in the TensorFlow child.
    their_answers = tf_state.comparisons(directory, cases)
    for (field, other), (equal, equal_reversed, unequal) in zip(cases, their_answers):
        assert (getattr(ours, field) == other) == equal, (field, other)
        assert (other == getattr(ours, field)) == equal_reversed, (field, other)
        assert (getattr(ours, field) != other) == unequal, (field, other)
    assert ours.model_checkpoint_path == theirs["model_checkpoint_path"]
    assert ours.last_preserved_timestamp == theirs["last_preserved_timestamp"]
