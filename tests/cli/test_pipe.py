"""A reader that goes away early (``trackpoint inspect ... | head -1``) ends the command quietly."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EXAMPLES
from trackpoint.cli import main


@pytest.mark.slow  # the CLI in a child process: seconds
def test_a_closed_pipe_ends_quietly_with_the_sigpipe_status(tmp_path) -> None:
    # Far more output than a pipe buffers (64 KiB), so the writer meets the closed pipe mid-listing.
    prefix = tp.save_tensors(
        str(tmp_path / "many"), {f"layer_{i:05d}/kernel": np.zeros(1, np.float32) for i in range(5000)}
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trackpoint", "inspect", prefix], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert first.split() == [b"key", b"dtype", b"shape"]
    assert err == b""


@pytest.mark.slow  # a shell pipeline of child processes: seconds
def test_a_shell_pipeline_into_head(tmp_path) -> None:
    prefix = tp.save_tensors(str(tmp_path / "many"), {f"k{i:05d}": np.zeros(1) for i in range(5000)})
    result = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {sys.executable} -m trackpoint inspect {prefix} | head -2"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 141
    assert result.stdout.splitlines()[1].startswith("k00000") and result.stderr == ""


class _Closed(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_in_process(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdout", _Closed())
    assert main(["inspect", str(EXAMPLES / "tf_model")]) == 141
    assert capsys.readouterr().err == ""
