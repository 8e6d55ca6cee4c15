"""Values waiting for their objects survive trackpoint deleting or replacing their checkpoint.

A restore closes its files when it returns (see test_restore_files.py). When a
CheckpointManager rotates that checkpoint out, or a save overwrites its prefix, the values
no object has taken yet are read into memory first, so restore-on-create still gives them.
"""

from __future__ import annotations

import numpy as np

import trackpoint as tp
from tests.helpers import open_files, with_slots


def test_a_manager_rotating_out_the_restored_checkpoint_keeps_the_waiting_values(tmp_path) -> None:
    source = with_slots(3.0)
    tp.CheckpointManager(source, str(tmp_path), max_to_keep=1).save()
    model = tp.Module()
    model.a = tp.Variable(np.zeros(3, np.float32))
    ckpt = tp.Checkpoint(model=model)
    manager = tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=1)
    status = ckpt.restore(manager.latest_checkpoint)
    manager.save()  # ckpt-2 replaces ckpt-1, which model.b and the optimizer slots still wait on
    assert not (tmp_path / "ckpt-1.index").exists() and open_files(tmp_path) == []

    model.b = tp.Variable(np.zeros(2, np.float64))
    ckpt.optimizer = tp.optimizers.Adam(0.1)
    ckpt.optimizer.apply_gradients([(np.zeros(3, np.float32), model.a)])
    status.assert_consumed()
    assert model.b.numpy().tolist() == [4.0, 4.0]
    assert ckpt.optimizer.get_slot(model.a, "m") is not None
    assert open_files(tmp_path) == []


def test_overwriting_the_restored_prefix_keeps_the_waiting_values(tmp_path) -> None:
    path = with_slots(1.0).write(str(tmp_path / "weights"))
    model = tp.Module()
    model.a = tp.Variable(np.zeros(3, np.float32))
    ckpt = tp.Checkpoint(model=model)
    ckpt.read(path).expect_partial()
    ckpt.write(path)  # the usual "keep the latest weights" overwrite, before model.b exists
    model.b = tp.Variable(np.zeros(2, np.float64))
    assert model.b.numpy().tolist() == [2.0, 2.0]  # the value of the checkpoint that was restored
    assert tp.load_variable(path, "model/a/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [1.0, 1.0, 1.0]


def test_only_values_no_object_took_are_kept(tmp_path) -> None:
    from trackpoint._graph import kept_values

    path = with_slots(1.0).write(str(tmp_path / "c"))
    model = tp.Module()
    model.a = tp.Variable(np.zeros(3, np.float32))
    tp.Checkpoint(model=model).read(path).expect_partial()
    (restore,) = [r for r in kept_values._restores if r.real_prefix.endswith("/c")]
    kept_values.keep_values_of(path)
    assert sorted(restore.values.kept) == [
        "model/a/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
        "model/a/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/VARIABLE_VALUE",
        "model/b/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/beta1_power/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/beta2_power/.ATTRIBUTES/VARIABLE_VALUE",
    ]  # model.a was taken
