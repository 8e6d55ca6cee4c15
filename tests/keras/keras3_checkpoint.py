"""Keras 3 objects in ``trackpoint.keras.Checkpoint`` and the ``ModelCheckpoint`` callback, in a process
of its own on one backend: ``KERAS_BACKEND=jax python -m tests.keras.keras3_checkpoint DIR out.json``.

Records for ``tests/keras/test_keras3_checkpoint.py``: whether a run resumed from a
``CheckpointManager`` save (sync and async) continues bit for bit as the uninterrupted run, with
Dropout's random stream; the values every saved key holds (``DIR/<model>/values.npz``, for
TensorFlow to read back); and what the callback left in its directory.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import keras
import numpy as np

import trackpoint as tp
import trackpoint.keras as tpk
from tests.keras import zoo

MODELS = ["cnn", "transformer"]  # Dropout and BatchNorm; MultiHeadAttention (each a JIT compile or two)


def _fresh(name: str) -> tuple[Any, Any]:
    model = zoo.build(name, keras)
    model.compile(optimizer=zoo.optimizer(name, keras), loss="mse")
    return model, model.optimizer


def _state(model: Any) -> list[np.ndarray]:
    return [np.asarray(v.numpy()).copy() for v in [*model.variables, *model.optimizer.variables]]


def _rng() -> dict[str, Any]:
    """On the PyTorch backend, an unseeded Dropout draws from torch's global generator rather than
    its seed state: an exact resume keeps that generator too (``trackpoint.torch.RNGState``)."""
    if keras.backend.backend() != "torch":
        return {}
    import trackpoint.torch as tpt

    return {"rng": tpt.RNGState()}


def _resume(root: str, name: str, enable_async: bool) -> dict[str, Any]:
    directory = os.path.join(root, f"{name}-async" if enable_async else name)
    x, y = zoo.data(name)
    model, optimizer = _fresh(name)
    model.train_on_batch(x, y)
    manager = tp.CheckpointManager(tpk.Checkpoint(model=model, optimizer=optimizer, **_rng()), directory, max_to_keep=2)
    prefix = manager.save(options=tp.CheckpointOptions(enable_async=enable_async))
    for _ in range(2):
        model.train_on_batch(x, y)  # meanwhile, an async save goes on
    manager.checkpoint.sync()
    uninterrupted = _state(model)
    resumed, _ = _fresh(name)
    again = tp.CheckpointManager(
        tpk.Checkpoint(model=resumed, optimizer=resumed.optimizer, **_rng()), directory, max_to_keep=2
    )
    assert again.restore_or_initialize() == prefix
    status = again.checkpoint.restore(prefix)
    status.assert_consumed()
    for _ in range(2):
        resumed.train_on_batch(x, y)
    same = [np.array_equal(a, b) for a, b in zip(uninterrupted, _state(resumed))]
    if not enable_async:
        with tp.load_checkpoint(prefix) as reader:
            keys = [k for k in reader.get_variable_to_shape_map() if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
            np.savez(os.path.join(directory, "values.npz"), **{k: reader.get_tensor(k) for k in keys})
    return {"prefix": prefix, "variables": len(same), "bit_identical": all(same)}


def _callback(root: str) -> dict[str, Any]:
    directory = os.path.join(root, "callback")
    x, y = zoo.data("transformer")
    model, _ = _fresh("transformer")
    callback = tpk.ModelCheckpoint(directory, max_to_keep=2)
    model.fit(x, y, epochs=4, batch_size=4, verbose=0, callbacks=[callback])
    trained = [np.asarray(v.numpy()).copy() for v in model.weights]
    by_batch = tpk.ModelCheckpoint(os.path.join(root, "by_batch"), max_to_keep=None, save_freq=3)
    model.fit(x, y, epochs=2, batch_size=4, verbose=0, callbacks=[by_batch])  # 4 batches: saves after 3
    restored, _ = _fresh("transformer")
    tpk.Checkpoint(model=restored, optimizer=restored.optimizer).restore(directory)
    return {
        "kept": sorted(callback.manager.checkpoints),
        "latest": tp.latest_checkpoint(directory),
        "by_batch": sorted(by_batch.manager.checkpoints),
        "epoch_4_restored": all(np.array_equal(a, np.asarray(b.numpy())) for a, b in zip(trained, restored.weights)),
    }


def main(root: str, out: str) -> None:
    results: dict[str, Any] = {"backend": keras.backend.backend()}
    for name in MODELS:
        results[name] = _resume(root, name, enable_async=False)
    results["cnn-async"] = _resume(root, "cnn", enable_async=True)
    results["callback"] = _callback(root)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
