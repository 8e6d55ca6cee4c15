"""get_checkpoint_state's repeated fields compare as TensorFlow 2.21's protobuf fields do."""

from __future__ import annotations

import tensorflow as tf

import trackpoint as tp


def test_repeated_fields_equal_lists_as_tf_does(tmp_path) -> None:
    directory = str(tmp_path)
    manager = tp.CheckpointManager(tp.Checkpoint(v=tp.Variable(1.0)), directory, max_to_keep=3)
    for _ in range(2):
        manager.save()
    theirs, ours = tf.train.get_checkpoint_state(directory), tp.get_checkpoint_state(directory)
    paths, stamps = list(theirs.all_model_checkpoint_paths), list(theirs.all_model_checkpoint_timestamps)
    for field, value in (("all_model_checkpoint_paths", paths), ("all_model_checkpoint_timestamps", stamps)):
        for other in (value, value[:1], [], [*value, value[0]]):
            assert (getattr(ours, field) == other) == (getattr(theirs, field) == other), (field, other)
            assert (other == getattr(ours, field)) == (other == getattr(theirs, field)), (field, other)
            assert (getattr(ours, field) != other) == (getattr(theirs, field) != other), (field, other)
    assert ours.model_checkpoint_path == theirs.model_checkpoint_path
    assert ours.last_preserved_timestamp == theirs.last_preserved_timestamp
