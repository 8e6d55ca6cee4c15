"""The Keras 3 side of the Keras 2 to Keras 3 tests, run in a process of its own per backend:
``KERAS_BACKEND=jax python -m tests.keras.keras3_side tests/golden/keras2 out.json``.

For every model of ``tests/keras/zoo.py`` and every way Keras 2 saved it, builds the same
architecture in Keras 3, restores the checkpoint with ``trackpoint.keras.restore`` and records:
the report, whether every restored variable holds the checkpoint's bytes, how far the outputs are
from Keras 2's, and how far the loss after one more training step is from Keras 2's. Then the
strictness cases, and whether anything imported TensorFlow. The test reads the JSON it writes.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
import traceback
from typing import Any, ClassVar


class _NoTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes this process one without TensorFlow, though it is installed beside: importing it
    fails as it would where it is not installed (a spec is found, so that torch's and Keras's
    availability checks by ``find_spec`` still see a package, but loading it fails). Every import
    attempted is noted, with whether trackpoint's code was on the way."""

    attempts: ClassVar[list[tuple[str, bool]]] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == "tensorflow" or name.startswith("tensorflow."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec: Any) -> Any:
        ours = any("/trackpoint/" in frame.filename for frame in traceback.extract_stack())
        self.attempts.append((spec.name, ours))
        raise ModuleNotFoundError(f"No module named {spec.name!r} (blocked by tests/keras/keras3_side.py)")

    def exec_module(self, module: Any) -> None:
        raise AssertionError("never reached: create_module raises")


sys.meta_path.insert(0, _NoTensorFlow())

import keras
import numpy as np

import trackpoint as tp
import trackpoint.keras as tpk
from tests.keras import zoo

WAYS = {"sw": "sw", "mc": "mc", "tc": "tc/ckpt"}  # save_weights, ModelCheckpoint, tf.train.Checkpoint
CONTROLS = ("cnn", "subclassed")  # Adam and SGD momentum (each control costs a JIT compile)


def _inputs(expected: Any) -> Any:
    xs = [expected[k] for k in sorted(expected.files) if k.startswith("x")]
    return xs if len(xs) > 1 else xs[0]


def _same_bytes(variable: Any, stored: np.ndarray) -> bool:
    value = np.asarray(keras.ops.convert_to_numpy(variable))
    if variable.name == "iteration":  # int32 on some backends, int64 in Keras 2
        return int(value) == int(stored)
    return value.dtype == stored.dtype and value.shape == stored.shape and value.tobytes() == stored.tobytes()


def _zero(variables: list[Any]) -> None:
    for variable in variables:
        variable.assign(np.zeros(tuple(variable.shape), str(variable.dtype)))


def _model(root: str, name: str, with_optimizer: bool = True) -> dict[str, Any]:
    """Restore the three files of one model into one Keras 3 model (zeroed before each, so each
    restore must bring every value itself), each checked bit for bit; then outputs and one more
    training step, once (building a model and training it cost JAX a compile per shape)."""
    expected = np.load(f"{root}/{name}/expected.npz")
    x, y = _inputs(expected), expected["y"]
    model = zoo.build(name, keras)
    optimizer = zoo.optimizer(name, keras)
    model.compile(optimizer=optimizer, loss="mse")
    out: dict[str, Any] = {}
    for way in WAYS if with_optimizer else ("sw",):
        if optimizer.built:  # all but the learning rate, which is the Keras 3 optimizer's own
            _zero([*model.weights, *(v for v in optimizer.variables if v.name != "learning_rate")])
        path = f"{root}/{name}/{WAYS[way]}"
        report = tpk.restore(model, path, optimizer=optimizer if with_optimizer else None)
        variables = {v.path: v for v in [*model.variables, *optimizer.variables]}
        with tp.load_checkpoint(path) as reader:
            differing = [p for p, k in report.restored.items() if not _same_bytes(variables[p], reader.get_tensor(k))]
        out[way] = {
            "complete": report.complete,
            "restored": len(report.restored),
            "model_weights": len(model.weights),
            "optimizer_state": len(optimizer.variables),
            "differing": differing,
        }
    outputs = np.asarray(keras.ops.convert_to_numpy(model(x, training=False)))
    zoo.no_dropout(model)
    model.train_on_batch(x, y)
    after = np.asarray(keras.ops.convert_to_numpy(model(x, training=True)), np.float64)  # see zoo.LOSS_AFTER
    out["output_diff"] = float(np.max(np.abs(outputs - expected["outputs"])))
    out["loss_diff"] = abs(float(np.mean((after - y) ** 2)) - float(expected["loss_after"]))
    return out


def _strict(root: str) -> dict[str, Any]:
    """An extra layer and a wider one: named, and nothing changed."""
    out = {}
    layers = keras.layers
    variants = {
        "extra layer": lambda: [layers.Dense(5, activation="relu"), layers.Dense(2), layers.Dense(2)],
        "wider layer": lambda: [layers.Dense(6, activation="relu"), layers.Dense(2)],
    }
    for label, stack in variants.items():
        model = keras.Sequential([keras.Input((4,)), *stack()])
        before = [np.asarray(keras.ops.convert_to_numpy(v)).copy() for v in model.variables]
        try:
            tpk.restore(model, f"{root}/frozen/sw")
            message = None
        except tp.errors.InvalidArgumentError as exc:
            message = str(exc)
        after = [np.asarray(keras.ops.convert_to_numpy(v)) for v in model.variables]
        lenient = tpk.restore(keras.Sequential([keras.Input((4,)), *stack()]), f"{root}/frozen/sw", strict=False)
        out[label] = {
            "message": message,
            "unchanged": all(np.array_equal(a, b) for a, b in zip(before, after)),
            "lenient": {"missing": lenient.missing, "unexpected": lenient.unexpected, "mismatched": lenient.mismatched},
            "lenient_restored": sorted(lenient.restored),
        }
    try:
        tpk.restore(keras.Sequential([layers.Dense(2)]), f"{root}/frozen/sw")
        out["unbuilt"] = {"message": None}
    except tp.errors.InvalidArgumentError as exc:
        out["unbuilt"] = {"message": str(exc)}
    return out


def main(root: str, out: str) -> None:
    results: dict[str, Any] = {"backend": keras.backend.backend()}
    for name in zoo.MODELS:
        results[name] = _model(root, name)
        if name in CONTROLS:  # the same step with a fresh optimizer: its restored state matters
            results[f"{name}/control"] = _model(root, name, with_optimizer=False)
    results["strict"] = _strict(root)
    results["tensorflow_imported"] = any(m == "tensorflow" or m.startswith("tensorflow.") for m in sys.modules)
    results["tensorflow_attempts"] = sorted({name for name, _ in _NoTensorFlow.attempts})
    results["tensorflow_attempts_by_trackpoint"] = sorted({name for name, ours in _NoTensorFlow.attempts if ours})
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
