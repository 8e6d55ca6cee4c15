"""TensorFlow's side of test_convert_tf.py: it restores what ``tp.convert`` wrote and writes what it converts."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def _modules(weights: dict[str, np.ndarray]) -> tuple[tf.Module, tf.Module]:
    """TF modules shaped like the test's weights (``model`` and ``optimizer_free``), all values zero."""
    model = tf.Module()
    model.encoder = tf.Module()
    model.encoder.dense = tf.Module()
    model.encoder.dense.kernel = tf.Variable(np.zeros_like(weights["model.encoder.dense.kernel"]))
    model.encoder.dense.bias = tf.Variable(np.zeros_like(weights["model.encoder.dense.bias"]))
    model.head = tf.Module()
    model.head.w = tf.Variable(np.zeros_like(weights["model.head.w"]))
    model.steps = tf.Variable(np.int64(0))
    other = tf.Module()
    other.scale = tf.Variable(np.zeros(1, np.float16))
    return model, other


def restore_converted(prefix: str, weights: dict[str, np.ndarray], next_prefix: str) -> dict:
    """Zero modules shaped like ``weights`` ``restore`` ``prefix`` with ``assert_consumed()``: the values
    they hold, the save counter, where the next ``save`` goes, and ``tf.train.load_variable`` of head/w."""
    model, other = _modules(weights)
    # restore() creates a save_counter: the converted checkpoint has one (0), so everything is consumed.
    checkpoint = tf.train.Checkpoint(model=model, optimizer_free=other)
    checkpoint.restore(prefix).assert_consumed()
    return {
        "kernel": model.encoder.dense.kernel.numpy(),
        "steps": model.steps.numpy(),
        "scale": other.scale.numpy(),
        "save_counter": int(checkpoint.save_counter.numpy()),
        "next": checkpoint.save(next_prefix),  # and training carries on from it
        "head/w": tf.train.load_variable(prefix, "model/head/w/.ATTRIBUTES/VARIABLE_VALUE"),
    }


def read_converted(prefix: str, weights: dict[str, np.ndarray]) -> np.ndarray:
    """Zero modules shaped like ``weights`` ``read`` ``prefix`` with ``assert_consumed()``: head/w after."""
    model, other = _modules(weights)
    tf.train.Checkpoint(model=model, optimizer_free=other).read(prefix).assert_consumed()
    return model.head.w.numpy()


def save_sliced(prefix: str) -> tuple[str, np.ndarray]:
    """``model.big`` (10x4 float32, sliced by a 64-byte MaxShardSizePolicy) and ``model.small`` saved at
    ``prefix``: the path and ``big``'s value."""
    model = tf.Module()
    model.big = tf.Variable(np.arange(40, dtype=np.float32).reshape(10, 4))
    model.small = tf.Variable(np.ones(3, np.float64))
    options = tf.train.CheckpointOptions(experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(64))
    return tf.train.Checkpoint(model=model).save(prefix, options=options), model.big.numpy()


def restore_sliced(prefix: str) -> np.ndarray:
    """A fresh module of zeros shaped like :func:`save_sliced`'s restores ``prefix`` with
    ``assert_consumed()``: ``big`` after."""
    fresh = tf.Module()
    fresh.big = tf.Variable(np.zeros((10, 4), np.float32))
    fresh.small = tf.Variable(np.zeros(3))
    tf.train.Checkpoint(model=fresh).restore(prefix).assert_consumed()
    return fresh.big.numpy()


def _keras_model() -> tuple:
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def keras_write(prefix: str) -> tuple[str, list[np.ndarray]]:
    """A Keras model (weights 1, 2, ...) with its Adam's slots after one step of ones, written at
    ``prefix``: the path, and the values of its weights then its optimizer's variables."""
    model, optimizer = _keras_model()
    model.set_weights([np.full(w.shape, i + 1, np.float32) for i, w in enumerate(model.get_weights())])
    optimizer.apply_gradients([(tf.ones_like(v), v) for v in model.trainable_variables])
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(prefix)
    return path, [v.numpy() for v in model.weights + optimizer.variables]


def keras_read(prefix: str) -> list[np.ndarray]:
    """A fresh Keras model and optimizer read ``prefix`` with ``assert_consumed()``: their values, in the
    order of :func:`keras_write`'s."""
    fresh, fresh_optimizer = _keras_model()
    tf.train.Checkpoint(model=fresh, optimizer=fresh_optimizer).read(prefix).assert_consumed()
    return [v.numpy() for v in fresh.weights + fresh_optimizer.variables]
