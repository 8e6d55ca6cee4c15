"""CheckpointManager's ``last_checkpoint_step`` and clock warning, side by side with TensorFlow 2.21."""

from __future__ import annotations

import os
import time
import warnings

import pytest

import trackpoint as tp
from tests.interop.manager_steps import run_steps
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_manager = tf_side("manager")

# (checkpoint_interval, last_checkpoint_step, check_interval, steps)
SCENARIOS = {
    "from_last": (2, 1, True, [1, 2, 3, 4, 5, 6, 7]),
    "none": (2, None, True, [1, 2, 3, 4, 5, 6, 7]),
    "ahead_of_the_steps": (3, 10, True, [4, 8, 12, 13, 14, 20]),
    "no_check": (5, 4, False, [4, 4, 5, 5, 6, 9]),
    "zero": (1, 0, True, [0, 0, 1, 1, 3]),
    "no_interval": (None, 3, True, [1, 2, 3]),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_last_checkpoint_step_saves_at_the_steps_tf_saves_at(tmp_path, scenario: str) -> None:
    interval, last, check, steps = SCENARIOS[scenario]
    theirs = tf_manager.run_steps(str(tmp_path / "tf"), interval, last, check, steps)
    classes = (tp.Variable, tp.Checkpoint, tp.CheckpointManager)
    ours = run_steps(classes, str(tmp_path / "tp"), interval, last, check, steps)
    assert ours == theirs


def test_both_warn_when_the_clock_is_behind_the_last_preserved_timestamp(tmp_path) -> None:
    directory = str(tmp_path)
    tp.CheckpointManager(tp.Checkpoint(v=tp.Variable(1.0)), directory, max_to_keep=1).save()
    ahead = time.time() + 7200.0
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(
            f'model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n'
            f"all_model_checkpoint_timestamps: {ahead}\nlast_preserved_timestamp: {ahead}\n"
        )

    lines, their_checkpoints, their_latest = tf_manager.open_manager(directory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = tp.CheckpointManager(tp.Checkpoint(v=tp.Variable(1.0)), directory, max_to_keep=1)
    phrase = "seconds behind the last preserved checkpoint timestamp"
    assert [line for line in lines if phrase in line]
    assert [w for w in caught if phrase in str(w.message) and issubclass(w.category, UserWarning)]
    assert ours.checkpoints == their_checkpoints == []
    assert ours.latest_checkpoint == their_latest
