"""A restore checks every value for the objects that exist before it assigns any (issue 15).

Values for objects created later (restore-on-create, slots a restore creates) are checked
when they arrive; one that is refused stays pending for the next object created in its place.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EveryTensorAlone
from trackpoint._format.bundle_reader import BundleReader

KEY_B = "model/b/.ATTRIBUTES/VARIABLE_VALUE"
KEY_C = "model/c/.ATTRIBUTES/VARIABLE_VALUE"
BIG = 2 << 20  # float32 elements of c: 8 MiB, more than one read batch, so c is read after a and b


def _model(b: np.ndarray, fill: float = 0.0) -> tp.Module:
    # Not helpers.model: ``b`` is the value under test, and ``c`` is big enough to be read in a later batch.
    model = tp.Module()
    model.a = tp.Variable(np.full(3, fill, np.float32))
    model.b = tp.Variable(b)
    model.c = tp.Variable(np.full(BIG, fill, np.float32))
    return model


def _values(model: tp.Module) -> list[float]:
    return [float(model.a.numpy()[0]), float(model.b.numpy()[0]), float(model.c.numpy()[-1])]


def _saved(tmp_path: pathlib.Path, b: np.ndarray, options: tp.CheckpointOptions | None = None) -> str:
    return tp.Checkpoint(model=_model(b, 7.0)).write(str(tmp_path / "ckpt"), options)


def _damage(prefix: str, key: str) -> None:
    """Flip one byte inside the stored value of ``key``."""
    entry = BundleReader(prefix).entry(key)
    path = f"{prefix}.data-{entry.shard_id:05d}-of-00001"
    with open(path, "r+b") as f:
        f.seek(entry.offset + entry.size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


# -- one restore checks every value for the existing objects before it assigns any ------------


def test_a_shape_mismatch_in_the_second_of_three_variables_assigns_none(tmp_path) -> None:
    path = _saved(tmp_path, np.full(4, 7.0, np.float32))
    live = _model(np.zeros(3, np.float32))
    with pytest.raises(tp.errors.InvalidArgumentError) as raised:
        tp.Checkpoint(model=live).restore(path)
    message = str(raised.value)
    assert KEY_B in message and "float32[3]" in message and "float32[4]" in message and path in message
    assert _values(live) == [0.0, 0.0, 0.0]


def test_a_dtype_mismatch_assigns_none(tmp_path) -> None:
    path = _saved(tmp_path, np.full(3, 7.0, np.float64))
    live = _model(np.zeros(3, np.float32))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"model/b/.*float32\[3\].*float64\[3\]"):
        tp.Checkpoint(model=live).read(path)
    assert _values(live) == [0.0, 0.0, 0.0]


def test_a_damaged_value_of_the_third_variable_assigns_none(tmp_path) -> None:
    path = _saved(tmp_path, np.full(3, 7.0, np.float32))
    _damage(path, KEY_C)
    live = _model(np.zeros(3, np.float32))
    with pytest.raises(tp.errors.DataLossError, match=r"checksum mismatch for key 'model/c/"):
        tp.Checkpoint(model=live).restore(path)
    assert _values(live) == [0.0, 0.0, 0.0]


def test_a_missing_shard_assigns_none(tmp_path) -> None:
    path = _saved(
        tmp_path, np.full(3, 7.0, np.float32), tp.CheckpointOptions(experimental_sharding_callback=EveryTensorAlone())
    )
    shards = sorted(tmp_path.glob("ckpt.data-*"))
    entry = BundleReader(path).entry(KEY_C)
    shards[entry.shard_id].unlink()
    live = _model(np.zeros(3, np.float32))
    with pytest.raises(tp.errors.NotFoundError, match="data shard"):
        tp.Checkpoint(model=live).restore(path)
    assert _values(live) == [0.0, 0.0, 0.0]


def test_a_mismatch_in_an_attached_dependency_leaves_the_root_alone(tmp_path) -> None:
    root, extra = tp.Module(), tp.Module()
    root.w = tp.Variable(np.full(2, 7.0, np.float32))
    extra.v = tp.Variable(np.full(5, 7.0, np.float32))
    path = tp.Checkpoint(root, extra=extra).write(str(tmp_path / "ckpt"))
    live_root, live_extra = tp.Module(), tp.Module()
    live_root.w = tp.Variable(np.zeros(2, np.float32))
    live_extra.v = tp.Variable(np.zeros(4, np.float32))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"extra/v/"):
        tp.Checkpoint(live_root, extra=live_extra).restore(path)
    assert live_root.w.numpy().tolist() == [0.0, 0.0]


def test_a_failed_restore_creates_no_slots_and_leaves_nothing_pending(tmp_path) -> None:
    source = _model(np.full(4, 7.0, np.float32), 7.0)
    source.d = tp.Variable(np.full(2, 7.0, np.float32))
    optimizer = tp.optimizers.Adam(0.1)
    optimizer.apply_gradients([(np.zeros_like(v.numpy()), v) for v in (source.a, source.b, source.c)])
    path = tp.Checkpoint(model=source, optimizer=optimizer).write(str(tmp_path / "ckpt"))
    live, live_optimizer = _model(np.zeros(3, np.float32)), tp.optimizers.Adam(0.1)
    # The error is the variable's, naming its key: not the slot's, which would be created first.
    with pytest.raises(tp.errors.InvalidArgumentError, match=KEY_B):
        tp.Checkpoint(model=live, optimizer=live_optimizer).restore(path)
    assert live_optimizer.get_slot_names() == [] and live_optimizer.get_slot(live.a, "m") is None
    live.d = tp.Variable(np.zeros(2, np.float32))  # nothing of the failed restore waits for it
    assert live.d.numpy().tolist() == [0.0, 0.0]


def test_existing_slots_keep_their_values_when_a_later_value_mismatches(tmp_path) -> None:
    def trained(v: int, fill: float) -> tp.Checkpoint:
        holder, extra = tp.Module(), tp.Module()
        holder.w = tp.Variable(np.full(3, fill, np.float32))
        holder.optimizer = tp.optimizers.Adam(0.1)
        holder.optimizer.apply_gradients([(np.full(3, fill, np.float32), holder.w)])
        extra.v = tp.Variable(np.full(v, fill, np.float32))  # restored after the root's subtree
        return tp.Checkpoint(holder, extra=extra)

    path = trained(4, 7.0).write(str(tmp_path / "ckpt"))
    live = trained(3, 0.0)
    holder = live.root

    def state() -> list[list[float]]:
        return [holder.w.numpy().tolist()] + [holder.optimizer.get_slot(holder.w, n).numpy().tolist() for n in "mv"]

    before = state()
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"extra/v/"):
        live.read(path)
    assert state() == before


def test_a_replayed_restore_is_all_or_nothing_too(tmp_path, reuse) -> None:
    good = _saved(tmp_path, np.full(3, 7.0, np.float32))
    bad = tp.Checkpoint(model=_model(np.full(4, 9.0, np.float32), 9.0)).write(str(tmp_path / "bad"))
    live = _model(np.zeros(3, np.float32))
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(good).assert_consumed()
    ckpt.read(good).assert_consumed()  # the layout is known: the next read of this graph replays
    for variable in (live.a, live.b, live.c):
        variable.assign(np.zeros(variable.shape, np.float32))
    reuse.clear()
    with pytest.raises(tp.errors.InvalidArgumentError, match=KEY_B):
        ckpt.read(bad)
    assert reuse.repeated()
    assert _values(live) == [0.0, 0.0, 0.0]


def test_an_object_that_refuses_its_tensors_leaves_the_variables_alone(tmp_path) -> None:
    class State(tp.PythonState):
        def __init__(self, refuse: bool) -> None:
            self.refuse, self.data = refuse, {"x": 1}

        def serialize(self) -> str:
            return json.dumps(self.data)

        def deserialize(self, string_value: bytes) -> None:
            if self.refuse:
                raise tp.errors.InvalidArgumentError("not this one")
            self.data = json.loads(string_value)

    def model(fill: float, refuse: bool) -> tp.Module:
        m = tp.Module()
        m.a = tp.Variable(np.full(2, fill, np.float32))
        m.z = State(refuse)  # after a in walk order
        return m

    path = tp.Checkpoint(model=model(7.0, False)).write(str(tmp_path / "ckpt"))
    live = model(0.0, True)
    with pytest.raises(tp.errors.InvalidArgumentError, match="not this one"):
        tp.Checkpoint(model=live).restore(path)
    assert live.a.numpy().tolist() == [0.0, 0.0]


def test_a_complete_restore_still_assigns_everything(tmp_path) -> None:
    path = _saved(tmp_path, np.full(3, 7.0, np.float32))
    live = _model(np.zeros(3, np.float32))
    tp.Checkpoint(model=live).read(path).assert_consumed()
    assert _values(live) == [7.0, 7.0, 7.0]


# -- a refused restore-on-create keeps its value for the next object -------------------------


def test_a_refused_restore_on_create_stays_pending_for_the_next_object(tmp_path) -> None:
    path = tp.Checkpoint(model=_model(np.full(3, 7.0, np.float32), 7.0)).write(str(tmp_path / "ckpt"))
    model = tp.Module()
    status = tp.Checkpoint(model=model).read(path).expect_partial()  # a and c are never created
    with pytest.raises(tp.errors.InvalidArgumentError, match=KEY_B):
        model.b = tp.Variable(np.zeros(4, np.float32))
    assert "b" not in model._trackable_children()
    report = status.report()
    assert report.pending["(root).model.b"] is True
    assert "(root).model.b" not in report.missing_from_checkpoint
    model.b = tp.Variable(np.zeros(3, np.float32))
    assert model.b.numpy().tolist() == [7.0, 7.0, 7.0]
    assert "(root).model.b" not in status.report().pending


def test_a_refused_subtree_leaves_all_of_it_pending(tmp_path) -> None:
    def dense(bias: int, fill: float) -> tp.Module:
        layer = tp.Module()
        layer.kernel = tp.Variable(np.full(3, fill, np.float32))
        layer.bias = tp.Variable(np.full(bias, fill, np.float32))
        return layer

    source = tp.Module()
    source.dense = dense(2, 7.0)
    path = tp.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    model = tp.Module()
    status = tp.Checkpoint(model=model).read(path)
    wrong = dense(5, 0.0)
    with pytest.raises(tp.errors.InvalidArgumentError, match="dense/bias"):
        model.dense = wrong
    assert wrong.kernel.numpy().tolist() == [0.0, 0.0, 0.0]  # its kernel fits, but nothing was assigned
    assert status.report().pending == {"(root).model.dense.kernel": True, "(root).model.dense.bias": True}
    model.dense = right = dense(2, 0.0)
    assert right.kernel.numpy().tolist() == [7.0, 7.0, 7.0] and right.bias.numpy().tolist() == [7.0, 7.0]
    status.assert_consumed()


def test_a_refused_restore_on_create_of_a_restored_slot_stays_pending(tmp_path) -> None:
    var = tp.Variable(np.full(3, 1.0, np.float32))
    optimizer = tp.optimizers.SGD(0.1, momentum=0.9)
    optimizer.apply_gradients([(np.ones(3, np.float32), var)])
    path = tp.Checkpoint(var=var, optimizer=optimizer).write(str(tmp_path / "ckpt"))
    live_optimizer = tp.optimizers.SGD(0.1, momentum=0.9)
    root = tp.Checkpoint(optimizer=live_optimizer)
    status = root.read(path)
    with pytest.raises(tp.errors.InvalidArgumentError):
        root.var = tp.Variable(np.zeros(4, np.float32))
    assert status.report().pending["(root).var"] is True
    root.var = live = tp.Variable(np.zeros(3, np.float32))
    assert live.numpy().tolist() == var.numpy().tolist()
    assert (
        live_optimizer.get_slot(live, "momentum").numpy().tolist()
        == optimizer.get_slot(var, "momentum").numpy().tolist()
    )
