"""Build the same object structures with TensorFlow or trackpoint and save them.

    python structures.py tf|tp OUT_DIR

Each structure goes to ``OUT_DIR/<name>/``. Run in a fresh process per side: TF numbers
slot-variable names process-wide ("w/Adam", then "w/Adam_2" for a later optimizer), and so
does trackpoint, so only fresh processes compare byte for byte.
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


if __name__ == "__main__":
    main()
