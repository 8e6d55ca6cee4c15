"""Name-based restore of a TF1 ``Saver`` checkpoint: trackpoint against TF 2.21, scenario by scenario.

TensorFlow writes the checkpoint (scoped names, float32 and float64, an int64 ``global_step``, a
string, a partitioned variable saved as slices, Adam slots and beta powers, a momentum slot);
then each scenario runs once in TF (``tf_side/name_based.py``, with ``tf.Variable``\\ s and TF1's
own optimizers) and once here (``tp.Variable``\\ s and ``tp.optimizers``), and the two must end
with the same values, bit for bit, and the same answer from every status method.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import trackpoint as tp
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_compat = tf_side("compat")
tf_name_based = tf_side("name_based")
ASSERTIONS = ("assert_consumed", "assert_existing_objects_matched", "assert_nontrivial_match")

WORDS = ["words", "bert/embeddings/word_embeddings", "float32", [8, 4]]
KERNEL = ["kernel", "bert/encoder/layer_0/attention/kernel", "float64", [4, 4]]
POOLER = ["pooler", "bert/pooler/dense/kernel", "float32", [6, 2]]  # saved as 3 slices
BIAS = ["bias", "output/bias", "float32", [2]]
VOCAB = ["vocab", "vocab", "string", [3]]
STEP = ["step", "global_step", "int64", []]
EXTRA = ["extra", "not/in/the/checkpoint", "float32", [2]]

SCENARIOS: dict[str, dict[str, Any]] = {
    "everything, Adam slots made before": {
        "variables": [WORDS, KERNEL, POOLER, BIAS, VOCAB, STEP],
        "optimizer": "adam",
        "slot_vars": ["words", "kernel", "pooler"],
        "slots": "before",
    },
    "momentum slot made before": {
        "variables": [BIAS],
        "optimizer": "momentum",
        "slot_vars": ["bias"],
        "slots": "before",
    },
    "some variables: the values no object claims are fine": {"variables": [WORDS, STEP]},
    "a variable the checkpoint lacks": {"variables": [WORDS, EXTRA]},
    "variables created after the restore": {"variables": [WORDS], "later": [STEP, KERNEL, VOCAB]},
    "a variable the checkpoint lacks, created after": {"variables": [WORDS], "later": [EXTRA]},
    "Adam slots made after the restore": {
        "variables": [WORDS, KERNEL],
        "optimizer": "adam",
        "slot_vars": ["words", "kernel"],
        "slots": "after",
    },
    "read() rather than restore()": {"variables": [WORDS, STEP], "method": "read"},
    "nothing to restore": {"variables": []},
    "a dtype mismatch": {"variables": [WORDS, ["kernel", KERNEL[1], "float32", [4, 4]]]},
}


def _variable(name: str, dtype: str, shape: list[int]) -> tp.Variable:
    value = np.full(shape, b"", dtype=object) if dtype == "string" else np.zeros(shape, dtype)
    return tp.Variable(value, name=name)


def _optimizer(kind: str | None) -> tp.optimizers.Optimizer | None:
    if kind == "adam":
        return tp.optimizers.Adam(0.1)
    if kind == "momentum":
        return tp.optimizers.SGD(0.1, momentum=0.9)
    return None


def _outcome(call: Any) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the class name is what the test compares
        return type(exc).__name__
    return "pass"


def run_here(prefix: str, scenario: dict[str, Any]) -> dict[str, Any]:
    """``tf_side/name_based.run`` with trackpoint's objects."""
    model = tp.Module()
    for attr, name, dtype, shape in scenario["variables"]:
        setattr(model, attr, _variable(name, dtype, shape))
    optimizer = _optimizer(scenario.get("optimizer"))
    slot_vars = [getattr(model, attr) for attr in scenario.get("slot_vars", [])]
    if optimizer is not None and scenario.get("slots") == "before":
        optimizer.apply_gradients([(np.zeros(v.shape, v.dtype), v) for v in slot_vars])
    objects = {"model": model} if optimizer is None else {"model": model, "optimizer": optimizer}
    checkpoint = tp.Checkpoint(**objects)
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
        for name in ("beta1_power", "beta2_power"):
            power = optimizer._lookup_dependency(name)
            if power is not None:
                values[name] = power.numpy()
    outcomes = {name: _outcome(getattr(status, name)) for name in ASSERTIONS}
    return {
        "error": None,
        "status": type(status).__name__,
        "values": values,
        "outcomes": outcomes,
        "expect_partial_is_status": status.expect_partial() is status,
        "initialize_or_restore": status.initialize_or_restore(),
    }


@pytest.fixture(scope="module")
def tf1_prefix(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tf_compat.saver_checkpoint(str(tmp_path_factory.mktemp("tf1")))


def _same(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_name_based_restore_does_what_tensorflow_does(tf1_prefix: str, name: str) -> None:
    scenario = SCENARIOS[name]
    theirs = tf_name_based.run(tf1_prefix, scenario)
    ours = run_here(tf1_prefix, scenario)
    assert ours["error"] == theirs["error"]
    if theirs["error"] is not None:
        return
    assert ours["status"] == theirs["status"] == "NameBasedSaverStatus"
    assert ours["outcomes"] == theirs["outcomes"]
    assert sorted(ours["values"]) == sorted(theirs["values"])
    for label, value in theirs["values"].items():
        assert _same(ours["values"][label], value), (label, ours["values"][label], value)
    assert ours["expect_partial_is_status"] and theirs["expect_partial_is_status"]
    assert ours["initialize_or_restore"] is theirs["initialize_or_restore"] is None


def test_the_scenarios_cover_what_the_issue_names(tf1_prefix: str) -> None:
    """The comparisons above are not vacuous: TF restored values, and both outcomes occur."""
    full = tf_name_based.run(tf1_prefix, SCENARIOS["everything, Adam slots made before"])
    with tp.load_checkpoint(tf1_prefix) as reader:
        assert _same(full["values"]["model/pooler"], reader.get_tensor("bert/pooler/dense/kernel"))
        assert _same(full["values"]["slot/kernel/v"], reader.get_tensor("bert/encoder/layer_0/attention/kernel/Adam_1"))
        assert _same(full["values"]["beta2_power"], reader.get_tensor("beta2_power"))
        assert full["values"]["model/vocab"].tolist() == [b"[CLS]", b"hello", b"\xff"]
    assert set(full["outcomes"].values()) == {"pass"}
    late = tf_name_based.run(tf1_prefix, SCENARIOS["Adam slots made after the restore"])
    assert set(late["outcomes"].values()) == {"AssertionError"}
    assert not late["values"]["slot/words/m"].any() and late["values"]["beta1_power"] != np.float32(0.9)
    assert tf_name_based.run(tf1_prefix, SCENARIOS["a dtype mismatch"])["error"] == "InvalidArgumentError"
