"""A weakly referenced root in ``tf.train.Checkpoint``, for test_tf_weakref_root.py."""

from __future__ import annotations

import gc
import os
import weakref

import tensorflow as tf

from tests.interop import structures


def write_weak_root(prefix: str) -> str:
    root, extra = structures.weak_root(tf.Variable, tf.Module)
    return tf.train.Checkpoint(weakref.ref(root), extra=extra).write(prefix)


def call(ckpt: object, operation: str, directory: str, path: str) -> object:
    """``save``/``write`` into ``directory``, or ``restore``/``read`` of ``path``: the test's ``_call``."""
    if operation == "save":
        return ckpt.save(os.path.join(directory, "ckpt"))  # type: ignore[attr-defined]
    if operation == "write":
        return ckpt.write(os.path.join(directory, "w"))  # type: ignore[attr-defined]
    return getattr(ckpt, operation)(path)


def after_the_root_is_gone(directory: str, operation: str) -> dict:
    """Save with a weak root, drop the root, then :func:`call` ``operation``: whether the root was gone,
    the class names of what the call raised (None if nothing), whether ``ckpt.root`` is still a weak
    reference, and the files of a second save or write found in ``directory``."""
    root, _ = structures.weak_root(tf.Variable, tf.Module)
    ref = weakref.ref(root)
    ckpt = tf.train.Checkpoint(root=ref)
    path = ckpt.save(os.path.join(directory, "ckpt"))
    del root
    gc.collect()
    gone = ref() is None
    raised = None
    try:
        call(ckpt, operation, directory, path)
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        raised = [cls.__name__ for cls in type(exc).__mro__]
    return {
        "gone": gone,
        "raised": raised,
        "weak": isinstance(ckpt.root, weakref.ref),
        "files": sorted(f for f in os.listdir(directory) if f.startswith(("ckpt-2", "w."))),
    }
