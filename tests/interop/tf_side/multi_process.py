"""TensorFlow's object-based restore of what several processes saved, for test_tf_multi_process.py."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def restore_ranks(path: str, full: list[int], replicated: int) -> np.ndarray:
    """A module with ``w`` (``full``, float32) and ``rest`` (float64 vectors of 7, 14, ...) restores ``path``
    with ``assert_existing_objects_matched()``: ``w`` after."""
    module = tf.Module()
    module.w = tf.Variable(np.zeros(full, np.float32))
    module.rest = [tf.Variable(np.zeros((i + 1) * 7)) for i in range(replicated)]
    tf.train.Checkpoint(model=module).restore(path).assert_existing_objects_matched()
    return module.w.numpy()
