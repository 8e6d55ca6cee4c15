"""An unchanged script written for TensorFlow gives, under ``python -m trackpoint.compat``, what it
gives with the real TensorFlow 2.21, on a TF1 ``Saver`` checkpoint TensorFlow wrote; and the
stand-in refuses a process that holds the real TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_compat = tf_side("compat")
SCRIPT = Path(__file__).with_name("dump_weights.py")


def _run(command: list[str], out: Path) -> tuple[str, dict[str, np.ndarray]]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    with np.load(out, allow_pickle=True) as arrays:
        return result.stdout, {name: arrays[name] for name in arrays.files}


def test_a_tensorflow_script_gives_the_same_results_on_the_stand_in(tmp_path) -> None:
    directory = tmp_path / "tf1"
    directory.mkdir()
    tf_compat.saver_checkpoint(str(directory))
    theirs_out, ours_out = tmp_path / "theirs.npz", tmp_path / "ours.npz"
    theirs = _run([sys.executable, str(SCRIPT), str(directory), str(theirs_out)], theirs_out)
    ours = _run([sys.executable, "-m", "trackpoint.compat", str(SCRIPT), str(directory), str(ours_out)], ours_out)
    assert ours[0] == theirs[0]  # the script's own line: count, checkpoint, version
    assert sorted(ours[1]) == sorted(theirs[1])
    names = list(theirs[1]["__names"])
    assert {"global_step", "beta1_power", "bert/embeddings/word_embeddings/Adam_1", "vocab"} <= set(names)
    assert str(theirs[1]["__missing"]) == "NotFoundError"
    for name, value in theirs[1].items():
        mine = ours[1][name]
        assert mine.dtype == value.dtype and mine.shape == value.shape, name
        if value.dtype == object:
            assert mine.tolist() == value.tolist(), name
        else:
            assert mine.tobytes() == value.tobytes(), name  # bit for bit


def test_the_stand_in_refuses_a_process_holding_the_real_tensorflow() -> None:
    message = tf_compat.refusal()
    assert "real tensorflow is imported" in message and "new process" in message, message
