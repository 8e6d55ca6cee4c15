"""TF 2.21's name-based restore (``NameBasedSaverStatus``) of a TF1 checkpoint, scenario by scenario.

A scenario (see ``tests/interop/test_name_based_tf.py``, which runs the same one with trackpoint)
says which variables exist, by which global names, which TF1 optimizer keeps slots for which of
them and when the slots are made, and what is created after the restore. The result holds the
values every object ends with and how each status method answered.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

ASSERTIONS = ("assert_consumed", "assert_existing_objects_matched", "assert_nontrivial_match")


def _variable(name: str, dtype: str, shape: list[int]) -> tf.Variable:
    value = np.full(shape, b"", dtype=object) if dtype == "string" else np.zeros(shape, dtype)
    return tf.Variable(value, name=name)


def _optimizer(kind: str | None) -> Any:
    if kind == "adam":
        return tf.compat.v1.train.AdamOptimizer(0.1)
    if kind == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
    return None


def _outcome(call: Any) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the class name is what the test compares
        return type(exc).__name__
    return "pass"


def run(prefix: str, scenario: dict[str, Any]) -> dict[str, Any]:
    """Run ``scenario`` against the TF1 checkpoint at ``prefix`` with TF's own objects."""
    tf.compat.v1.reset_default_graph()  # TF1 optimizers name slots by a counter of this graph
    model = tf.Module()
    for attr, name, dtype, shape in scenario["variables"]:
        setattr(model, attr, _variable(name, dtype, shape))
    optimizer = _optimizer(scenario.get("optimizer"))
    slot_vars = [getattr(model, attr) for attr in scenario.get("slot_vars", [])]
    if optimizer is not None and scenario.get("slots") == "before":
        optimizer.apply_gradients([(tf.zeros_like(v), v) for v in slot_vars])
    objects = {"model": model} if optimizer is None else {"model": model, "optimizer": optimizer}
    checkpoint = tf.train.Checkpoint(**objects)
    method = getattr(checkpoint, scenario.get("method", "restore"))
    try:
        status = method(prefix)
    except Exception as exc:  # noqa: BLE001 - the class name is what the test compares
        return {"error": type(exc).__name__, "status": None}
    if optimizer is not None and scenario.get("slots") == "after":
        optimizer._create_slots(slot_vars)
    for attr, name, dtype, shape in scenario.get("later", []):
        setattr(model, attr, _variable(name, dtype, shape))
    values = {f"model/{attr}": getattr(model, attr).numpy() for attr, *_ in scenario["variables"]}
    values.update({f"model/{attr}": getattr(model, attr).numpy() for attr, *_ in scenario.get("later", [])})
    if optimizer is not None:
        for attr, variable in zip(scenario.get("slot_vars", []), slot_vars):
            for slot_name in optimizer.get_slot_names():
                slot = optimizer.get_slot(variable, slot_name)
                if slot is not None:
                    values[f"slot/{attr}/{slot_name}"] = slot.numpy()
        for variable in optimizer.variables():
            if variable.name.split(":")[0] in ("beta1_power", "beta2_power"):
                values[variable.name.split(":")[0]] = variable.numpy()
    outcomes = {name: _outcome(getattr(status, name)) for name in ASSERTIONS}
    return {
        "error": None,
        "status": type(status).__name__,
        "values": values,
        "outcomes": outcomes,
        "expect_partial_is_status": status.expect_partial() is status,
        "initialize_or_restore": status.initialize_or_restore(),
    }
