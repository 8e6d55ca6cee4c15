"""Writes the Keras 2 fixtures of ``tests/keras``: ``python -m tests.keras.make_keras2 tests/golden/keras2``.

Needs TensorFlow 2.21 and ``tf_keras`` 2.21 (Keras 2), which the tests themselves never import. For
each model of ``tests/keras/zoo.py``: train two epochs, saving with ``ModelCheckpoint(save_weights_only=
True)`` into ``mc/``; then ``model.save_weights`` into ``sw/`` and ``tf.train.Checkpoint(model=...,
optimizer=...)`` into ``tc/``; then record in ``expected.npz`` the model's outputs on the data in
inference mode, and its loss after one more training step (see ``zoo.LOSS_AFTER``).
"""

from __future__ import annotations

import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import tf_keras

from tests.keras import zoo


def _write(name: str, directory: str) -> None:
    tf.keras.utils.set_random_seed(sum(map(ord, name)))
    model = zoo.build(name, tf_keras)
    model.compile(optimizer=zoo.optimizer(name, tf_keras, legacy=True), loss="mse")
    x, y = zoo.data(name)
    callback = tf_keras.callbacks.ModelCheckpoint(os.path.join(directory, "mc", "ckpt"), save_weights_only=True)
    model.fit(x, y, epochs=2, batch_size=4, verbose=0, callbacks=[callback], shuffle=False)
    model.save_weights(os.path.join(directory, "sw", "ckpt"))
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(os.path.join(directory, "tc", "ckpt"))
    outputs = model(x, training=False).numpy()
    zoo.no_dropout(model)
    model.train_on_batch(x, y)
    after = model(x, training=True).numpy()  # see zoo.LOSS_AFTER
    arrays = {"y": y, "outputs": outputs, "loss_after": np.float64(np.mean((after.astype(np.float64) - y) ** 2))}
    for i, part in enumerate(x if isinstance(x, list) else [x]):
        arrays[f"x{i}"] = part
    np.savez(os.path.join(directory, "expected.npz"), **arrays)


def main(root: str) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for name in zoo.MODELS:
        _write(name, os.path.join(root, name))
    print(f"wrote {len(zoo.MODELS)} models under {root} with tf_keras {tf_keras.__version__}, TF {tf.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
