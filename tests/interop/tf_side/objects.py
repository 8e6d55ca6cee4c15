"""TensorFlow's objects, optimizers and training loops for test_tf_objects.py."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tests.interop import structures


def restore_nested(path: str) -> dict:
    """structures.py's "nested" with zeros (and ``extra`` 9.0) restores ``path`` with ``assert_consumed()``:
    the values it then holds."""
    m = structures.zeroed_nested(tf.Variable, tf.Module)
    tf.train.Checkpoint(model=m, extra=tf.Variable([9.0])).restore(path).assert_consumed()
    return {
        "a_var": m.a_var.numpy().tolist(),
        "b_var": m.b_var.numpy().tolist(),
        "s": m.s.numpy(),
        "lst[2][0]": (m.lst[2][0].numpy(), m.lst[2][0].dtype.name),
        "dct": (m.dct["k/1"].numpy(), m.dct["x.y"].numpy().tolist()),
        "tup": (m.tup[0].numpy(), m.tup[1].numpy()),
    }


def restore_slots(path: str) -> dict[str, np.ndarray]:
    """A dense module and a TF1 Adam with slots (after one zero step) restore ``path`` with
    ``assert_consumed()``: the kernel, its ``m`` slot and ``beta1_power`` after."""
    m = tf.Module()
    m.dense = tf.Module()
    m.dense.kernel = tf.Variable(np.zeros((2, 3), np.float32))
    m.dense.bias = tf.Variable(np.zeros(3, np.float32))
    adam = tf.compat.v1.train.AdamOptimizer(0.1)
    adam.apply_gradients([(tf.zeros((2, 3)), m.dense.kernel), (tf.zeros(3), m.dense.bias)])
    tf.train.Checkpoint(model=m, optimizer=adam).restore(path).assert_consumed()
    beta1_power, _ = adam._get_beta_accumulators()
    return {
        "kernel": m.dense.kernel.numpy(),
        "m": adam.get_slot(m.dense.kernel, "m").numpy(),
        "beta1_power": beta1_power.numpy(),
    }


def _optimizer(which: str) -> tf.compat.v1.train.Optimizer:
    if which == "adam":
        return tf.compat.v1.train.AdamOptimizer(0.01, 0.8, 0.95, 1e-7)
    if which == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(0.1)
    return tf.compat.v1.train.MomentumOptimizer(0.1, 0.9, use_nesterov=which == "nesterov")


def optimize(which: str, init: list[np.ndarray], grads: list[list[np.ndarray]], prefix: str) -> tuple[list, list]:
    """Variables from ``init``, one step of optimizer ``which`` per entry of ``grads``, then written at
    ``prefix`` with the optimizer: their values, and ``tf.train.list_variables`` of the file."""
    tf_vars = [tf.Variable(v) for v in init]
    opt = _optimizer(which)
    for step_grads in grads:
        opt.apply_gradients([(tf.constant(g), v) for g, v in zip(step_grads, tf_vars, strict=False)])
    tf.train.Checkpoint(v=tf_vars, opt=opt).write(prefix)
    return [v.numpy() for v in tf_vars], tf.train.list_variables(prefix)


def _model() -> tuple[tf.Module, tf.compat.v1.train.AdamOptimizer]:
    m = tf.Module()
    m.w = tf.Variable(np.full((2, 3), 0.5, np.float32))
    m.b = tf.Variable(np.zeros(3, np.float32))
    return m, tf.compat.v1.train.AdamOptimizer(0.05)


def _steps(m: tf.Module, opt: tf.compat.v1.train.Optimizer, grads: list[list[np.ndarray]]) -> None:
    for step_grads in grads:
        opt.apply_gradients([(tf.constant(g), v) for g, v in zip(step_grads, [m.w, m.b], strict=False)])


def train(grads: list[list[np.ndarray]]) -> list[np.ndarray]:
    """The model's ``w`` and ``b`` after one Adam step per entry of ``grads``."""
    m, opt = _model()
    _steps(m, opt, grads)
    return [m.w.numpy(), m.b.numpy()]


def train_and_save(grads: list[list[np.ndarray]], prefix: str) -> str:
    """One Adam step per entry of ``grads``, then ``save(prefix)`` of model and optimizer: the path."""
    m, opt = _model()
    _steps(m, opt, grads)
    return tf.train.Checkpoint(model=m, optimizer=opt).save(prefix)


def restore_and_train(path: str, grads: list[list[np.ndarray]]) -> list[np.ndarray]:
    """A fresh model whose slots exist restores ``path`` with ``assert_consumed()`` and takes one step
    per entry of ``grads``: ``w`` and ``b`` after."""
    m, opt = _model()
    opt.apply_gradients([(tf.zeros_like(v), v) for v in [m.w, m.b]])  # create slots, then overwrite them
    tf.train.Checkpoint(model=m, optimizer=opt).restore(path).assert_consumed()
    _steps(m, opt, grads)
    return [m.w.numpy(), m.b.numpy()]
