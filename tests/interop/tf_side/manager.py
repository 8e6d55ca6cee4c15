"""``tf.train.CheckpointManager`` for test_tf_manager_steps.py and test_tf_objects.py."""

from __future__ import annotations

import tensorflow as tf

from tests.interop import manager_steps
from tests.interop.tf_side.log import tf_log_lines

# Variables a test's later call uses again, by the name the test gives (per TensorFlow child).
KEPT: dict[str, tf.Variable] = {}


def run_steps(
    directory: str, interval: int | None, last: int | None, check: bool, steps: list[int]
) -> tuple[list[int], list[str]]:
    """:func:`tests.interop.manager_steps.run_steps` with TensorFlow's classes."""
    classes = (tf.Variable, tf.train.Checkpoint, tf.train.CheckpointManager)
    return manager_steps.run_steps(classes, directory, interval, last, check, steps)


def open_manager(directory: str) -> tuple[list[str], list[str], str | None]:
    """A manager made over ``directory`` (max_to_keep=1): TF's log lines meanwhile, its checkpoints and
    latest checkpoint."""
    made: list[tf.train.CheckpointManager] = []
    lines = tf_log_lines(
        lambda: made.append(
            tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), directory, max_to_keep=1)
        )
    )
    return lines, made[0].checkpoints, made[0].latest_checkpoint


def save_steps(directory: str, kept: str) -> None:
    """Two saves of ``step`` (1 and 2) through a manager keeping 2; the variable is kept as ``kept``."""
    step = KEPT[kept] = tf.Variable(0, dtype=tf.int64)
    tf_manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), directory, max_to_keep=2)
    for _ in range(2):
        step.assign_add(1)
        tf_manager.save()


def restore_steps(directory: str, kept: str) -> tuple[list[str], int]:
    """A new manager over ``directory`` with the kept ``step``: its checkpoints, then ``step`` after
    ``restore_or_initialize()`` (the kept variable is dropped)."""
    step = KEPT.pop(kept)
    again = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), directory, max_to_keep=2)
    checkpoints = again.checkpoints
    again.restore_or_initialize()
    return checkpoints, int(step.numpy())
