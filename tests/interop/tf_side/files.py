"""What TensorFlow's readers see in checkpoint files and state files."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def load(prefix: str, keys: list[str] | None = None) -> dict:
    """``tf.train.load_checkpoint``: shapes and dtype names of every key, values of ``keys`` (all if None)."""
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = {key: dtype.name for key, dtype in reader.get_variable_to_dtype_map().items()}
    chosen = list(shapes) if keys is None else keys
    return {"shapes": shapes, "dtypes": dtypes, "tensors": {key: reader.get_tensor(key) for key in chosen}}


def list_variables(path: str) -> list[tuple[str, list[int]]]:
    return tf.train.list_variables(path)


def load_variable(path: str, key: str) -> np.ndarray:
    return tf.train.load_variable(path, key)


def checkpoint_state(directory: str) -> dict | None:
    """``tf.train.get_checkpoint_state``'s fields, and ``tf.train.latest_checkpoint``."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return None
    return {
        "model_checkpoint_path": state.model_checkpoint_path,
        "all_model_checkpoint_paths": list(state.all_model_checkpoint_paths),
        "all_model_checkpoint_timestamps": list(state.all_model_checkpoint_timestamps),
        "last_preserved_timestamp": state.last_preserved_timestamp,
        "latest_checkpoint": tf.train.latest_checkpoint(directory),
    }


def read_into_zeros(prefix: str, shapes: dict[str, tuple[list[int], str]]) -> dict[str, np.ndarray]:
    """A ``tf.train.Checkpoint`` of zero variables named by ``shapes`` (name -> (shape, dtype)) reads
    ``prefix`` with ``assert_consumed()``; their values after."""
    variables = {name: tf.Variable(tf.zeros(shape, dtype)) for name, (shape, dtype) in shapes.items()}
    tf.train.Checkpoint(**variables).read(prefix).assert_consumed()
    return {name: v.numpy() for name, v in variables.items()}


def write_variables(prefix: str, values: dict[str, np.ndarray]) -> str:
    """``tf.train.Checkpoint`` of one ``tf.Variable`` per value, written at ``prefix``: the path."""
    return tf.train.Checkpoint(**{name: tf.Variable(value) for name, value in values.items()}).write(prefix)
