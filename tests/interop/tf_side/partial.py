"""What TensorFlow logs when a partial restore is dropped, for test_tf_partial_restore_warning.py."""

from __future__ import annotations

import tensorflow as tf

from tests.helpers import no_gc
from tests.interop.tf_side.log import tf_log_lines


def write_checkpoint(prefix: str) -> str:
    """v1, v2 and a TF1 Adam with slots for v1 (trackpoint's optimizer layout), saved at ``prefix``."""
    v1, v2 = tf.Variable(2.0), tf.Variable(3.0)
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    optimizer.apply_gradients([(tf.constant(0.0), v1)])
    return tf.train.Checkpoint(v1=v1, v2=v2, optimizer=optimizer).save(prefix)


def _without_values(path: str) -> None:
    root = tf.train.Checkpoint(v1=tf.Module(), v2=tf.Variable(0.0))
    root.restore(path)
    del root


def _partial_root(path: str) -> None:
    root = tf.train.Checkpoint(v1=tf.Variable(0.0))
    root.restore(path)
    del root


RUNS = {"without_values": _without_values, "partial_root": _partial_root}


def dropped_restore_log(path: str, run: str) -> list[str]:
    """TensorFlow's log lines while ``RUNS[run]`` restores ``path`` and drops it, the cyclic garbage
    collector off (what it frees, reference counting frees)."""
    with no_gc():
        return tf_log_lines(lambda: RUNS[run](path))
