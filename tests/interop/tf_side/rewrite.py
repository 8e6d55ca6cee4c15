"""TensorFlow's side of test_rewrite_tf.py: it writes the sources and restores what ``tp.rewrite`` made."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf


def write_source(directory: str) -> tuple[str, dict[str, np.ndarray]]:
    """A TF checkpoint of a module and a TF1 Adam with slots after two steps; its values by key."""
    model = tf.Module()
    model.encoder = tf.Module()
    model.encoder.w = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    model.head = tf.Variable(np.array([0.5, -1.5, 2.25], np.float32), name="head")
    model.bias = tf.Variable(np.float32(0.25), name="bias")
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    for _ in range(2):
        optimizer.minimize(
            lambda: tf.reduce_sum(model.encoder.w**2) + tf.reduce_sum(model.head * 3.0) + model.bias**2,
            var_list=[model.encoder.w, model.head, model.bias],
        )
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(os.path.join(directory, "src"))
    reader = tf.train.load_checkpoint(path)
    return path, {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def _moved(head_first: bool) -> tuple[tf.Module, tf.compat.v1.train.AdamOptimizer]:
    """The TF structure the test's rules describe: encoder under backbone, head in float64 (its slots
    too, as TF makes them), bias without optimizer slots, a new variable scale. ``head_first``: made in
    the order rewrite writes (head, bias, the moved encoder, scale) instead of the source's."""
    model = tf.Module()
    if head_first:
        model.head = tf.Variable(tf.zeros(3, tf.float64), name="head")
        model.bias = tf.Variable(0.0, name="bias")
    model.backbone = tf.Module()
    model.backbone.encoder = tf.Module()
    model.backbone.encoder.w = tf.Variable(tf.zeros((2, 3)), name="w")
    if not head_first:
        model.head = tf.Variable(tf.zeros(3, tf.float64), name="head")
        model.bias = tf.Variable(0.0, name="bias")
    model.scale = tf.Variable(tf.zeros(4), name="scale")
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    pairs = [(tf.zeros((2, 3)), model.backbone.encoder.w), (tf.zeros(3, tf.float64), model.head)]
    optimizer.apply_gradients(pairs[::-1] if head_first else pairs)  # creates the slots of w and head only
    return model, optimizer


def restore_moved(prefix: str) -> dict:
    """:func:`_moved`'s structure reads ``prefix`` with ``assert_consumed()``: its values, slots and
    beta powers after (``head``'s dtype name too)."""
    model, optimizer = _moved(head_first=False)
    tf.train.Checkpoint(model=model, optimizer=optimizer).read(prefix).assert_consumed()
    w = model.backbone.encoder.w
    return {
        "w": w.numpy(),
        "head": model.head.numpy(),
        "head_dtype": model.head.dtype.name,
        "bias": model.bias.numpy(),
        "scale": model.scale.numpy(),
        "slots": {
            (name, slot): optimizer.get_slot(variable, slot).numpy()
            for name, variable in (("w", w), ("head", model.head))
            for slot in ("m", "v")
        },
        "powers": [float(power.numpy()) for power in optimizer._get_beta_accumulators()],
    }


def restore_moved_and_write_again(prefix: str, again: str) -> str:
    """:func:`_moved`'s structure, made in rewrite's order, reads ``prefix`` with ``assert_consumed()``
    and writes itself at ``again``: that path."""
    model, optimizer = _moved(head_first=True)
    tf.train.Checkpoint(model=model, optimizer=optimizer).read(prefix).assert_consumed()
    return tf.train.Checkpoint(model=model, optimizer=optimizer).write(again)


def restore_net(prefix: str) -> np.ndarray:
    """``net`` with ``encoder.w`` and ``head`` (no bias, no optimizer) reads ``prefix`` with
    ``assert_consumed()``: ``head`` after."""
    net = tf.Module()
    net.encoder = tf.Module()
    net.encoder.w = tf.Variable(tf.zeros((2, 3)))
    net.head = tf.Variable(tf.zeros(3))
    tf.train.Checkpoint(net=net).read(prefix).assert_consumed()
    return net.head.numpy()


def write_name_based(prefix: str) -> str:
    """A TF1 Saver checkpoint of layer/kernel (ones), layer/bias (zeros) and global_step (7)."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable("layer/kernel", initializer=np.ones((2, 2), np.float32))
        tf.compat.v1.get_variable("layer/bias", initializer=np.zeros(2, np.float32))
        tf.compat.v1.get_variable("global_step", initializer=np.int64(7))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return saver.save(session, prefix, write_meta_graph=False)


def save_slices(prefix: str, names: list[str], specs: list[str], values: list[np.ndarray]) -> None:
    """``tf.raw_ops.SaveV2`` of tensors or slices (``specs``) of them."""
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=specs, tensors=values)


def merge(prefixes: list[str], destination: str) -> None:
    """``tf.raw_ops.MergeV2Checkpoints`` (deleting the parts' directories)."""
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=prefixes, destination_prefix=destination, delete_old_dirs=True)


def _keras_model() -> tuple:
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    return model, keras.optimizers.Adam(0.01)


def keras_fit_and_write(prefix: str) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    """A Keras 3 model fitted two epochs, written with its optimizer at ``prefix``: the path, the model's
    weights and the optimizer's variables."""
    model, optimizer = _keras_model()
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=2, verbose=0)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(prefix)
    return path, [v.numpy() for v in model.weights], [v.numpy() for v in optimizer.variables]


def keras_read_renamed(prefix: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A fresh model as ``net`` and its built optimizer as ``training/adam`` read ``prefix`` with
    ``assert_consumed()``: the model's weights and the optimizer's variables."""
    fresh, fresh_optimizer = _keras_model()
    fresh_optimizer.build(fresh.trainable_variables)
    checkpoint = tf.train.Checkpoint(net=fresh, training=tf.Module())
    checkpoint.training.adam = fresh_optimizer
    checkpoint.read(prefix).assert_consumed()
    return [v.numpy() for v in fresh.weights], [v.numpy() for v in fresh_optimizer.variables]
