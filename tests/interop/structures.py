"""Build the same object structures with TensorFlow or trackpoint and save them.

    python structures.py tf|tp OUT_DIR

Each structure goes to ``OUT_DIR/<name>/``. Run in a fresh process per side: TF numbers
slot-variable names process-wide ("w/Adam", then "w/Adam_2" for a later optimizer), and so
does trackpoint, so only fresh processes compare byte for byte.

The builders below :func:`main` take a library's classes (``Variable``, ``Module``, ...), so that the
tests build with trackpoint's and ``tests/interop/tf_side`` with TensorFlow's the very same objects.
"""

from __future__ import annotations

import collections
import os
import sys

import numpy as np

Pair = collections.namedtuple("Pair", ["first", "second"])


def structures(lib: str):
    if lib == "tf":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        Variable, Module, Checkpoint = tf.Variable, tf.Module, tf.train.Checkpoint
        Adam, Momentum = tf.compat.v1.train.AdamOptimizer, tf.compat.v1.train.MomentumOptimizer

        def const(x):
            return tf.constant(x)
    else:
        import trackpoint as tp

        Variable, Module, Checkpoint = tp.Variable, tp.Module, tp.Checkpoint
        Adam = tp.optimizers.Adam

        def Momentum(lr, momentum):
            return tp.optimizers.SGD(lr, momentum=momentum)

        def const(x):
            return np.asarray(x)

    def nested():
        m = Module()
        m.a_var = Variable([1.0, 2.0, 3.0], name="a")
        m.b_var = Variable(np.arange(6, dtype=np.int32).reshape(2, 3), name="b")
        m.s = Variable(b"hello", name="s")
        m.lst = [Variable(1.5), 7, [Variable(np.float64(2.5))], []]
        m.dct = {"k/1": Variable(7, name="k"), "x.y": Variable([True, False]), "plain": 3}
        m.tup = Pair(Variable(np.int64(5)), Variable(np.float16(0.5)))
        m.sub = Module()
        m.sub.shared = m.a_var  # a second path to the same variable
        m.a_var = m.a_var  # re-assignment keeps the position
        return Checkpoint(model=m, extra=Variable([0.0], name="extra"))

    def with_slots():
        m = Module()
        m.dense = Module()
        m.dense.kernel = Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="kernel")
        m.dense.bias = Variable(np.zeros(3, np.float32), name="bias")
        adam = Adam(0.1)
        for step in range(3):
            grads = [
                const((np.arange(6, dtype=np.float32).reshape(2, 3) + step) / 10),
                const(np.full(3, 0.5 - step, np.float32)),
            ]
            adam.apply_gradients(list(zip(grads, [m.dense.kernel, m.dense.bias], strict=False)))
        return Checkpoint(model=m, optimizer=adam)

    def momentum():
        w = Variable([1.0, -1.0], name="w")
        opt = Momentum(0.05, 0.9)
        for step in range(4):
            opt.apply_gradients([(const(np.array([0.5, step], np.float32)), w)])
        return Checkpoint(w=w, opt=opt)

    def rooted():
        root = Module()
        root.x = Variable(1.0, name="x")
        return Checkpoint(root, extra=Variable([2.0], name="e"), a=Variable(3, name="a"))

    return {"nested": nested, "with_slots": with_slots, "momentum": momentum, "rooted": rooted}


def main() -> None:
    lib, out = sys.argv[1], sys.argv[2]
    for name, build in structures(lib).items():
        ckpt = build()
        ckpt.save(os.path.join(out, name, "ckpt"))
        ckpt.save(os.path.join(out, name, "ckpt"))  # save_counter moves on; the state file names ckpt-2


def zeroed_nested(Variable, Module, m=None):
    """The "nested" structure above with zeros, in TF's or our classes (filling ``m``)."""
    m = Module() if m is None else m
    m.a_var = Variable([0.0, 0.0, 0.0])
    m.b_var = Variable(np.zeros((2, 3), np.int32))
    m.s = Variable(b"")
    m.lst = [Variable(0.0), 7, [Variable(np.float64(0))], []]
    m.dct = {"k/1": Variable(0), "x.y": Variable([False, False]), "plain": 3}
    m.tup = Pair(Variable(np.int64(0)), Variable(np.float16(0)))
    m.sub = Module()
    m.sub.shared = m.a_var
    return m


def _simple_module(Variable, Module):
    class SimpleModule(Module):
        def __init__(self, name=None) -> None:
            super().__init__(name=name)
            self.a_var = Variable(5.0)
            self.b_var = Variable(4.0)
            self.vars = [Variable(1.0), Variable(2.0)]

    return SimpleModule


def view_saved(Variable, Module, Checkpoint, path: str) -> str:
    """The checkpoint of test_tf_view.py (TF's checkpoint_view_test structure), saved at ``path``."""
    simple = _simple_module(Variable, Module)
    root = simple(name="root")
    leaf = root.leaf = simple(name="leaf")
    leaf.leaf3 = Variable(6.0, name="leaf3")
    leaf.leaf4 = Variable(7.0, name="leaf4")
    return Checkpoint(root).save(path)


def view_live(Variable, Module):
    """The live objects test_tf_view.py diffs against :func:`view_saved`'s checkpoint."""
    simple = _simple_module(Variable, Module)
    root2 = simple(name="root")
    leaf2 = root2.leaf2 = simple(name="leaf2")
    leaf2.leaf3 = Variable(6.0)
    leaf2.leaf4 = Variable(7.0)
    return root2


def two_paths_live(Variable, Module, shared_live: bool):
    """Live objects for a checkpoint whose node 1 is reached by two edges (``a`` and ``b``): one object
    at both (``shared_live``) or two."""
    obj = Module()
    obj.a = Module()
    obj.b = obj.a if shared_live else Module()
    obj.a.v = Variable(0.0)
    return obj


def weak_root(Variable, Module):
    """A root module with a variable and a sub-module, and one more variable (test_tf_weakref_root.py)."""
    root = Module()
    root.v = Variable([1.0, 2.0])
    root.inner = Module()
    root.inner.w = Variable(3.0)
    return root, Variable(4.0)


if __name__ == "__main__":
    main()
