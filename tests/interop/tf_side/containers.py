"""container_rules.py's scenarios on TensorFlow, for test_tf_containers.py."""

from __future__ import annotations

import tensorflow as tf

from tests.interop import container_rules as rules


def outcomes() -> dict[str, tuple]:
    """Every scenario's outcome under TensorFlow."""
    lib = rules.Lib("tf")
    return {name: rules.outcome(lib, name) for name in rules.SCENARIOS}


def restore_and_write_back(name: str, path: str, back: str) -> str:
    """Scenario ``name`` built with TF's classes reads ``path`` with ``assert_consumed()``; a checkpoint
    of the same objects is then written at ``back``: its path."""
    theirs = rules.SCENARIOS[name](rules.Lib("tf"))
    tf.train.Checkpoint(root=theirs).read(path).assert_consumed()
    return tf.train.Checkpoint(root=theirs).write(back)
