"""tp.CheckpointManager: retention, preservation, intervals, init_fn, reopening."""

from __future__ import annotations

import os

import numpy as np
import pytest

import trackpoint as tp
from trackpoint import manager as manager_module


def _files(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_keeps_max_to_keep_and_deletes_older_files(tmp_path) -> None:
    v = tp.Variable(np.int64(0))
    manager = tp.CheckpointManager(tp.Checkpoint(v=v), str(tmp_path), max_to_keep=2)
    for _ in range(4):
        v.assign_add(1)
        manager.save()
    assert manager.checkpoints == [str(tmp_path / "ckpt-3"), str(tmp_path / "ckpt-4")]
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-4")
    assert _files(tmp_path) == [
        "checkpoint",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
    ]
    state = tp.get_checkpoint_state(str(tmp_path))
    assert state.all_model_checkpoint_paths == (str(tmp_path / "ckpt-3"), str(tmp_path / "ckpt-4"))
    assert len(state.all_model_checkpoint_timestamps) == 2


def test_checkpoint_number_and_name(tmp_path) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(1.0))
    manager = tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=None, checkpoint_name="model")
    assert manager.save(checkpoint_number=100) == str(tmp_path / "model-100")
    assert manager.save(checkpoint_number=tp.Variable(np.int64(7))) == str(tmp_path / "model-7")
    assert ckpt.save_counter.numpy() == 2  # incremented even with an explicit number


def test_keep_checkpoint_every_n_hours_preserves_files(tmp_path, monkeypatch) -> None:
    clock = [1_000_000.0]
    monkeypatch.setattr(manager_module.time, "time", lambda: clock[0])
    manager = tp.CheckpointManager(
        tp.Checkpoint(v=tp.Variable(1.0)), str(tmp_path), max_to_keep=1, keep_checkpoint_every_n_hours=1
    )
    for _ in range(4):
        clock[0] += 1800  # half an hour per save
        manager.save()
    # ckpt-2 is an hour after the start: preserved on disk, no longer listed.
    assert manager.checkpoints == [str(tmp_path / "ckpt-4")]
    assert "ckpt-2.index" in _files(tmp_path) and "ckpt-1.index" not in _files(tmp_path)
    assert "ckpt-3.index" not in _files(tmp_path)


def test_checkpoint_interval_with_step_counter(tmp_path) -> None:
    step = tp.Variable(np.int64(0))
    manager = tp.CheckpointManager(
        tp.Checkpoint(step=step), str(tmp_path), max_to_keep=None, step_counter=step, checkpoint_interval=5
    )
    saved = []
    for _ in range(12):
        saved.append(manager.save())
        step.assign_add(1)
    assert [p is not None for p in saved].count(True) == 3  # steps 0, 5, 10
    step.assign(np.int64(11))
    assert manager.save(check_interval=False) is not None
    assert manager.save(check_interval=False) is None  # same step twice
    with pytest.raises(tp.errors.InvalidArgumentError, match="step_counter"):
        tp.CheckpointManager(tp.Checkpoint(), str(tmp_path), 1, checkpoint_interval=3)


def test_restore_or_initialize_and_reopen(tmp_path) -> None:
    calls = []
    v = tp.Variable(1.0)
    manager = tp.CheckpointManager(tp.Checkpoint(v=v), str(tmp_path), max_to_keep=3, init_fn=lambda: calls.append(1))
    assert manager.restore_or_initialize() is None and calls == [1]
    v.assign(5.0)
    manager.save()
    w = tp.Variable(0.0)
    reopened = tp.CheckpointManager(tp.Checkpoint(v=w), str(tmp_path), max_to_keep=3)
    assert reopened.checkpoints == [str(tmp_path / "ckpt-1")]
    assert reopened.restore_or_initialize() == str(tmp_path / "ckpt-1")
    assert w.numpy() == 5.0
    assert reopened.save() == str(tmp_path / "ckpt-2")


def test_bad_arguments(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="max_to_keep"):
        tp.CheckpointManager(tp.Checkpoint(), str(tmp_path), max_to_keep=0)
    with pytest.raises(tp.errors.InvalidArgumentError, match="tp.Checkpoint"):
        tp.CheckpointManager(object(), str(tmp_path), max_to_keep=1)  # type: ignore[arg-type]
