"""Object-graph checkpoints move between TensorFlow 2.21 and trackpoint in both directions."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import assert_bit_equal
from tests.interop.structures import zeroed_nested
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_files, tf_objects, tf_manager = tf_side("files"), tf_side("objects"), tf_side("manager")

STRUCTURES = os.path.join(os.path.dirname(__file__), "structures.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _build(lib: str, out: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, STRUCTURES, lib, out], check=True, env=env, capture_output=True)


@pytest.fixture(scope="module")
def both_sides(tmp_path_factory) -> tuple[str, str]:
    base = tmp_path_factory.mktemp("structures")
    theirs, ours = str(base / "tf"), str(base / "tp")
    _build("tf", theirs)
    _build("tp", ours)
    return theirs, ours


@pytest.mark.parametrize("name", ["nested", "with_slots", "momentum", "rooted"])
def test_files_are_byte_identical_to_tf(both_sides: tuple[str, str], name: str) -> None:
    theirs, ours = (os.path.join(side, name) for side in both_sides)
    assert sorted(os.listdir(theirs)) == sorted(os.listdir(ours))
    for filename in os.listdir(theirs):
        assert filecmp.cmp(os.path.join(theirs, filename), os.path.join(ours, filename), shallow=False), filename


def test_tf_restores_our_nested_checkpoint(both_sides: tuple[str, str]) -> None:
    m = tf_objects.restore_nested(os.path.join(both_sides[1], "nested", "ckpt-2"))  # with assert_consumed()
    assert m["a_var"] == [1.0, 2.0, 3.0]
    assert m["b_var"] == [[0, 1, 2], [3, 4, 5]]
    assert m["s"] == b"hello"
    assert m["lst[2][0]"][0] == 2.5 and m["lst[2][0]"][1] == "float64"
    assert m["dct"][0] == 7 and m["dct"][1] == [True, False]
    assert m["tup"][0] == 5 and m["tup"][1] == np.float16(0.5)


def test_tf_restores_our_slots_with_assert_consumed(both_sides: tuple[str, str]) -> None:
    theirs = tf_objects.restore_slots(os.path.join(both_sides[1], "with_slots", "ckpt-2"))
    ours = tp.load_checkpoint(os.path.join(both_sides[1], "with_slots", "ckpt-2"))
    assert_bit_equal(theirs["kernel"], ours.get_tensor("model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"))
    m_slot = theirs["m"]
    assert_bit_equal(
        m_slot, ours.get_tensor("model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE")
    )
    assert theirs["beta1_power"] == ours.get_tensor("optimizer/beta1_power/.ATTRIBUTES/VARIABLE_VALUE")


def _tp_slots() -> tuple[tp.Checkpoint, tp.Module, tp.optimizers.Adam]:
    m = tp.Module()
    m.dense = tp.Module()
    m.dense.kernel = tp.Variable(np.zeros((2, 3), np.float32))
    m.dense.bias = tp.Variable(np.zeros(3, np.float32))
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.zeros((2, 3), np.float32), m.dense.kernel), (np.zeros(3, np.float32), m.dense.bias)])
    return tp.Checkpoint(model=m, optimizer=adam), m, adam


def test_we_restore_tf_slots_with_assert_consumed(both_sides: tuple[str, str]) -> None:
    path = os.path.join(both_sides[0], "with_slots", "ckpt-2")
    ckpt, m, adam = _tp_slots()
    ckpt.restore(path).assert_consumed()
    bias_key = "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE"
    slot_key = "model/dense/bias/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/VARIABLE_VALUE"
    theirs = tf_files.load(path, [bias_key, slot_key])["tensors"]
    assert_bit_equal(m.dense.bias.numpy(), theirs[bias_key])
    assert_bit_equal(adam.get_slot(m.dense.bias, "v").numpy(), theirs[slot_key])
    assert ckpt.save_counter.numpy() == 2


def test_tf_variable_nodes_are_read_from_their_bytes(both_sides: tuple[str, str], monkeypatch) -> None:
    """TF writes a variable's node in the layout the restore reads straight from the bytes."""
    from trackpoint._graph import walk

    found: list[str | None] = []
    real = walk.variable_keys

    def spy(nodes: list[bytes], ids: list[int]) -> list[str | None]:
        keys = real(nodes, ids)
        found.extend(keys)
        return keys

    monkeypatch.setattr(walk, "variable_keys", spy)
    ckpt, m, _ = _tp_slots()
    ckpt.restore(os.path.join(both_sides[0], "with_slots", "ckpt-2")).assert_consumed()
    assert {
        "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE",
        "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
    } <= set(found)
    assert m.dense.kernel.numpy().any()


def test_we_restore_tf_nested_into_fresh_objects_created_later(both_sides: tuple[str, str]) -> None:
    ckpt = tp.Checkpoint()
    status = ckpt.restore(os.path.join(both_sides[0], "nested", "ckpt-2"))
    m = tp.Module()
    ckpt.model = m
    zeroed_nested(tp.Variable, tp.Module, m)  # each value arrives as its attribute is assigned
    ckpt.extra = tp.Variable([0.0])
    status.assert_consumed()
    assert m.a_var.numpy().tolist() == [1.0, 2.0, 3.0] and m.s.numpy() == b"hello"
    assert m.tup[1].numpy() == np.float16(0.5) and ckpt.extra.numpy().tolist() == [0.0]


def _grads(step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(step)
    return [rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]


@pytest.mark.parametrize("which", ["adam", "momentum", "nesterov", "sgd"])
def test_optimizer_math_and_keys_match_tf(tmp_path, which: str) -> None:
    def make():  # TensorFlow's counterpart: tf_side/objects.py's _optimizer
        if which == "adam":
            return tp.optimizers.Adam(0.01, 0.8, 0.95, 1e-7)
        if which == "sgd":
            return tp.optimizers.SGD(0.1)
        nesterov = which == "nesterov"
        return tp.optimizers.SGD(0.1, momentum=0.9, nesterov=nesterov)

    init = [np.arange(6, dtype=np.float32).reshape(2, 3) / 7, np.ones(3, np.float32)]
    tp_vars = [tp.Variable(v) for v in init]
    tp_opt = make()
    grads = [_grads(step) for step in range(20)]
    # TF takes the same 20 steps and writes its variables and optimizer at tmp_path/tf.
    tf_values, tf_keys = tf_objects.optimize(which, init, grads, str(tmp_path / "tf"))
    for step in range(20):
        tp_opt.apply_gradients(list(zip(grads[step], tp_vars, strict=False)))
    for a, b in zip(tf_values, tp_vars, strict=False):
        np.testing.assert_allclose(b.numpy(), a, rtol=0, atol=1e-6)
    tp.Checkpoint(v=tp_vars, opt=tp_opt).write(str(tmp_path / "tp"))
    assert tp.list_variables(str(tmp_path / "tp")) == tf_keys


def test_training_stops_in_tf_and_resumes_here_and_back(tmp_path) -> None:
    grads = [_grads(step) for step in range(9)]
    # Reference: 9 uninterrupted steps in TensorFlow (w starts at 0.5, b at 0; Adam(0.05)).
    reference = tf_objects.train(grads)

    # 3 steps in TF, 3 here, 3 in TF again.
    first = tf_objects.train_and_save(grads[:3], str(tmp_path / "a" / "ckpt"))

    ours = tp.Module()
    ours.w = tp.Variable(np.zeros((2, 3), np.float32))
    ours.b = tp.Variable(np.zeros(3, np.float32))
    adam = tp.optimizers.Adam(0.05)
    ckpt = tp.Checkpoint(model=ours, optimizer=adam)
    status = ckpt.restore(first)
    for step in range(3, 6):  # slots and beta powers arrive as they are created
        adam.apply_gradients(list(zip(grads[step], [ours.w, ours.b], strict=False)))
    status.assert_consumed()
    second = ckpt.save(str(tmp_path / "b" / "ckpt"))

    # A fresh TF model with slots restores `second` with assert_consumed() and takes steps 6..8.
    w, b = tf_objects.restore_and_train(second, grads[6:])
    np.testing.assert_allclose(w, reference[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(b, reference[1], rtol=0, atol=1e-6)


def test_managers_pick_up_each_others_state(tmp_path) -> None:
    directory = str(tmp_path)
    # TF's step variable saved twice through a manager keeping 2; the TF child keeps it for the end.
    tf_manager.save_steps(directory, directory)
    ours = tp.Variable(np.int64(0))
    manager = tp.CheckpointManager(tp.Checkpoint(step=ours), directory, max_to_keep=2)
    assert manager.latest_checkpoint == os.path.join(directory, "ckpt-2")
    assert manager.restore_or_initialize() == os.path.join(directory, "ckpt-2")
    assert ours.numpy() == 2
    ours.assign_add(1)
    assert manager.save() == os.path.join(directory, "ckpt-3")
    assert sorted(os.listdir(directory)) == [
        "checkpoint",
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
    ]
    again, step = tf_manager.restore_steps(directory, directory)  # a new TF manager with the same step
    assert again == [os.path.join(directory, "ckpt-2"), os.path.join(directory, "ckpt-3")]
    assert step == 3
