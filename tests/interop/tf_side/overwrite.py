"""TensorFlow reads prefixes that trackpoint overwrote in place (test_tf_overwrite.py, the crash test)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def read(prefix: str, count: int = 6) -> set[float]:
    """A module of ``count`` zero float32[256] variables reads ``prefix`` with ``assert_consumed()``: the
    set of values it then holds. TensorFlow's error propagates."""
    model = tf.Module()
    model.vs = [tf.Variable(np.zeros(256, np.float32)) for _ in range(count)]
    tf.train.Checkpoint(model=model).read(prefix).assert_consumed()
    return {float(x) for v in model.vs for x in v.numpy()}


def read_each(prefixes: list[str], count: int) -> list[list]:
    """:func:`read` of each prefix: ``["ok", sorted values]`` or ``["error", "Class: message"]``."""
    results: list[list] = []
    for prefix in prefixes:
        try:
            results.append(["ok", sorted(read(prefix, count))])
        except Exception as exc:  # noqa: BLE001 - the outcome is the exception
            results.append(["error", type(exc).__name__ + ": " + str(exc)[:200]])
    return results
