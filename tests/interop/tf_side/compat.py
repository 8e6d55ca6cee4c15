"""TF1 checkpoints written by ``tf.compat.v1.train.Saver``, and the stand-in's refusal beside real TensorFlow."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf


def saver_checkpoint(directory: str) -> str:
    """A TF1 ``Saver`` checkpoint of scoped variables (float32, float64, int64 ``global_step``, a
    string, a variable partitioned in 3 and so saved as slices), after one Adam step (slots
    ``<var>/Adam``, ``<var>/Adam_1``, ``beta1_power``, ``beta2_power``) and one momentum step of
    ``output/bias`` (slot ``output/bias/Momentum``); returns its prefix."""
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        with v1.variable_scope("bert/embeddings"):
            words = v1.get_variable("word_embeddings", initializer=np.arange(32, dtype=np.float32).reshape(8, 4))
        with v1.variable_scope("bert/encoder/layer_0/attention"):
            kernel = v1.get_variable("kernel", initializer=np.linspace(-1, 1, 16).reshape(4, 4))
        with v1.variable_scope("bert/pooler/dense"):
            pooler = v1.get_variable(
                "kernel",
                shape=(6, 2),
                initializer=v1.zeros_initializer(),
                partitioner=v1.fixed_size_partitioner(3),
            )
        bias = v1.get_variable("output/bias", initializer=np.array([0.5, -0.5], np.float32))
        v1.get_variable("vocab", initializer=np.array([b"[CLS]", b"hello", b"\xff"], dtype=object), trainable=False)
        step = v1.train.get_or_create_global_step()
        loss = tf.cast(
            tf.reduce_sum(words * 2.0) + tf.reduce_sum(tf.square(tf.concat(list(pooler), 0))), tf.float64
        ) + tf.reduce_sum(kernel * kernel)
        train = v1.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
        momentum = v1.train.MomentumOptimizer(0.1, 0.9).minimize(tf.reduce_sum(bias * bias), var_list=[bias])
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            # Each part its own values, so that assembling the slices in the wrong order shows.
            session.run([part.assign(np.arange(4.0).reshape(2, 2) + 10 * i) for i, part in enumerate(pooler)])
            session.run([train, momentum])
            return v1.train.Saver().save(session, os.path.join(directory, "model.ckpt"), global_step=step)


def refusal() -> str:
    """What ``as_tensorflow()`` says in a process that imported the real TensorFlow."""
    from trackpoint.compat import as_tensorflow

    try:
        with as_tensorflow():
            pass
    except ImportError as exc:
        return str(exc)
    return "no refusal"
