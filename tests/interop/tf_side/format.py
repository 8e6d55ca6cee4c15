"""TensorFlow's own writers for test_tf_format.py."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def save_v2(prefix: str, tensors: dict[str, np.ndarray]) -> None:
    """``tf.raw_ops.SaveV2`` of whole tensors, in the dict's order."""
    names = list(tensors)
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(tensors[n]) for n in names],
    )


def checkpoint_save(prefix: str, value: list[float]) -> tuple[str, list]:
    """``tf.train.Checkpoint(v=...).save(prefix)``; its path and ``tf.train.list_variables`` of it."""
    path = tf.train.Checkpoint(v=tf.Variable(value)).save(prefix)
    return path, tf.train.list_variables(path)
