"""TensorFlow reads and runs what trackpoint saved of torch objects (test_torch_tf.py). No torch here."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def walk(path: str) -> dict:
    """The children ``tf.train.CheckpointView(path)`` gives: of the root, of ``model``, of ``model/2``."""
    view = tf.train.CheckpointView(path)
    root = view.children(0)
    layers = view.children(root["model"])
    return {"root": root, "model": layers, "model/2": view.children(layers["2"])}


def two_layer_outputs(path: str, x: np.ndarray) -> np.ndarray:
    """tf.Variables loaded by key from a torch ``Sequential(Linear, Tanh, Linear)``'s checkpoint, applied
    to ``x`` as torch's Linear does (x W^T + b)."""
    reader = tf.train.load_checkpoint(path)

    def variable(layer: int, name: str) -> tf.Variable:
        return tf.Variable(reader.get_tensor(f"model/{layer}/{name}/.ATTRIBUTES/VARIABLE_VALUE"))

    w0, b0, w2, b2 = variable(0, "weight"), variable(0, "bias"), variable(2, "weight"), variable(2, "bias")
    hidden = tf.tanh(tf.matmul(x, w0, transpose_b=True) + b0)  # torch's Linear: x W^T + b
    return (tf.matmul(hidden, w2, transpose_b=True) + b2).numpy()
