"""The real command with a closed or failing stdout or stderr: a nonzero status and at most one
line on stderr, never a traceback, nor Python's "Exception ignored" at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EXAMPLES
from trackpoint.cli import main

pytestmark = pytest.mark.slow  # every test runs the CLI in a child process: seconds each

MODEL = str(EXAMPLES / "tf_model")


def _run(argv: Sequence[str], close: Sequence[int] = (), stdout: int | None = subprocess.PIPE):
    """``python -m trackpoint argv`` with the descriptors ``close`` closed before it starts
    (as a shell's ``>&-`` and ``2>&-`` do)."""

    def closing() -> None:
        for fd in close:
            os.close(fd)

    # The interpreter itself, not a wrapper script (a shell shim would put its own file on a closed descriptor).
    return subprocess.run(
        [sys.executable, "-m", "trackpoint", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        preexec_fn=closing,
        check=False,
        timeout=120,
    )


def _quiet_failure(result: subprocess.CompletedProcess, status: int = 1) -> str:
    err = result.stderr.decode()
    assert result.returncode == status, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert len(err.splitlines()) <= 1, err
    return err


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["inspect", MODEL], ["inspect", MODEL, "--json"], ["tree", MODEL], ["inspect", "-h"]],
)
def test_a_closed_stdout_fails_in_one_line(argv: list[str]) -> None:
    err = _quiet_failure(_run(argv, close=[1]))
    assert "standard output" in err and "closed" in err


def test_diff_with_a_closed_stdout_reports_trouble_not_a_difference() -> None:
    _quiet_failure(_run(["diff", MODEL, MODEL], close=[1]), status=2)


def test_a_full_stdout_fails_in_one_line() -> None:
    with open("/dev/full", "wb") as full:
        err = _quiet_failure(_run(["inspect", MODEL, "--all-tensors"], stdout=full.fileno()))
    assert "standard output" in err and "No space left on device" in err


def test_a_closed_stderr_does_not_send_errors_to_stdout() -> None:
    result = _run(["inspect", str(EXAMPLES / "nothing here")], close=[2])
    assert result.returncode == 1 and result.stdout == b""
    result = _run(["inspect", MODEL], close=[2])
    assert result.returncode == 0 and b"Total number of params: 17" in result.stdout


def test_both_closed() -> None:
    assert _run(["inspect", MODEL], close=[1, 2]).returncode == 1
    assert _run(["--version"], close=[1, 2]).returncode == 1


def test_a_broken_pipe_still_ends_quietly(tmp_path) -> None:
    many = tp.save_tensors(str(tmp_path / "many"), {f"k{i:05d}": np.zeros(1) for i in range(5000)})
    for prefix, statuses in [(many, {141}), (MODEL, {0, 141})]:  # the small listing may fit the pipe
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {sys.executable} -m trackpoint inspect {prefix} | head -c1"],
            capture_output=True,
            check=False,
            timeout=120,
        )
        assert result.returncode in statuses and result.stdout == b"k" and result.stderr == b""


def test_in_process(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdout", None)  # what the interpreter sets when it starts with fd 1 closed
    assert main(["inspect", MODEL]) == 1
    assert main(["diff", MODEL, MODEL]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("standard output" in line for line in err)
    assert sys.stdout is None  # given back as it was
