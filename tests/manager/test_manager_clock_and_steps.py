"""CheckpointManager: the warning for a clock behind the state file, and ``last_checkpoint_step``."""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest

import trackpoint as tp


def _state_file(directory: str, stamp: float) -> None:
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(
            f'model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n'
            f"all_model_checkpoint_timestamps: {stamp}\nlast_preserved_timestamp: {stamp}\n"
        )


def test_a_clock_behind_the_last_preserved_timestamp_warns_and_keeps_what_it_cannot_date(tmp_path) -> None:
    directory = str(tmp_path)
    ckpt = tp.Checkpoint(v=tp.Variable(1.0))
    first = tp.CheckpointManager(ckpt, directory, max_to_keep=1).save()
    _state_file(directory, time.time() + 3600.0)  # saved by a machine an hour ahead
    with pytest.warns(
        UserWarning,
        match=r"time\.time\(\) returned a value 3[56]\d\d\.\d+ seconds behind the last "
        r"preserved checkpoint timestamp",
    ) as caught:
        manager = tp.CheckpointManager(ckpt, directory, max_to_keep=1, keep_checkpoint_every_n_hours=1.0)
    assert os.path.join(directory, "checkpoint") in str(caught[0].message)
    assert manager.checkpoints == []  # its date is unknown: never deleted, as in TF
    assert manager._last_preserved_timestamp <= time.time()
    manager.save()
    manager.save()
    assert os.path.exists(first + ".index")
    assert tp.get_checkpoint_state(directory).last_preserved_timestamp <= time.time()


def test_a_state_file_from_the_past_does_not_warn(tmp_path) -> None:
    directory = str(tmp_path)
    ckpt = tp.Checkpoint(v=tp.Variable(1.0))
    tp.CheckpointManager(ckpt, directory, max_to_keep=1).save()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.CheckpointManager(ckpt, directory, max_to_keep=1)


def _saves(
    manager: tp.CheckpointManager, step: tp.Variable, steps: list[int], check_interval: bool = True
) -> list[int]:
    saved = []
    for value in steps:
        step.assign(value)
        if manager.save(check_interval=check_interval) is not None:
            saved.append(value)
    return saved


@pytest.mark.parametrize("last", [1, np.int64(1), tp.Variable(1, dtype=np.int64)], ids=["int", "numpy", "variable"])
def test_last_checkpoint_step_is_where_the_interval_counts_from(tmp_path, last) -> None:
    step = tp.Variable(0, dtype=np.int64)
    manager = tp.CheckpointManager(
        tp.Checkpoint(v=tp.Variable(1.0)),
        str(tmp_path),
        max_to_keep=None,
        step_counter=step,
        checkpoint_interval=2,
        last_checkpoint_step=last,
    )
    assert _saves(manager, step, [1, 2, 3, 4, 5, 6]) == [3, 5]


def test_without_last_checkpoint_step_the_first_save_goes_through(tmp_path) -> None:
    step = tp.Variable(0, dtype=np.int64)
    manager = tp.CheckpointManager(
        tp.Checkpoint(v=tp.Variable(1.0)), str(tmp_path), max_to_keep=None, step_counter=step, checkpoint_interval=2
    )
    assert _saves(manager, step, [1, 2, 3, 4, 5, 6]) == [1, 3, 5]


def test_last_checkpoint_step_with_check_interval_false_skips_only_the_same_step(tmp_path) -> None:
    step = tp.Variable(0, dtype=np.int64)
    manager = tp.CheckpointManager(
        tp.Checkpoint(v=tp.Variable(1.0)),
        str(tmp_path),
        max_to_keep=None,
        step_counter=step,
        checkpoint_interval=10,
        last_checkpoint_step=4,
    )
    assert _saves(manager, step, [4, 5, 5, 6], check_interval=False) == [5, 6]


def test_last_checkpoint_step_is_ignored_without_an_interval_as_in_tf(tmp_path) -> None:
    manager = tp.CheckpointManager(
        tp.Checkpoint(v=tp.Variable(1.0)),
        str(tmp_path),
        max_to_keep=None,
        last_checkpoint_step="ignored, as TF ignores it",
    )
    assert manager.save() is not None and manager.save() is not None


def test_restore_or_initialize_replaces_last_checkpoint_step_with_the_restored_step(tmp_path) -> None:
    step = tp.Variable(0, dtype=np.int64)
    ckpt = tp.Checkpoint(step=step)
    step.assign(10)
    tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=None).save()
    step.assign(0)
    manager = tp.CheckpointManager(
        ckpt, str(tmp_path), max_to_keep=None, step_counter=step, checkpoint_interval=3, last_checkpoint_step=100
    )
    manager.restore_or_initialize()
    assert int(step.numpy()) == 10
    assert _saves(manager, step, [11, 12, 13, 14, 15]) == [13]


@pytest.mark.parametrize(
    "bad", [1.5, "3", np.array([1, 2]), tp.Variable(2.0)], ids=["float", "str", "array", "float var"]
)
def test_a_last_checkpoint_step_that_is_not_an_integer_is_rejected(tmp_path, bad) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="last_checkpoint_step must be an integer step number"):
        tp.CheckpointManager(
            tp.Checkpoint(),
            str(tmp_path),
            max_to_keep=1,
            step_counter=tp.Variable(0),
            checkpoint_interval=1,
            last_checkpoint_step=bad,
        )
