"""``trackpoint diff --rtol/--atol`` and ``CheckpointView.diff(rtol=, atol=)`` take finite tolerances >= 0 only.

A NaN tolerance made ``numpy.isclose`` warn and call every value close, so two different
checkpoints were reported equal (exit 0).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.cli import main

_BAD = ["nan", "-nan", "inf", "-inf", "-1", "-1e-300"]


def _pair(tmp_path) -> tuple[str, str]:
    def saved(name: str, value: float) -> str:
        model = tp.Module()
        model.w = tp.Variable(np.full(3, value, np.float32))
        return tp.Checkpoint(model=model).write(str(tmp_path / name))

    return saved("a", 1.0), saved("b", 2.0)


@pytest.mark.parametrize("option", ["--rtol", "--atol"])
@pytest.mark.parametrize("value", _BAD)
def test_the_cli_refuses_a_tolerance_that_is_not_finite_and_non_negative(
    tmp_path, capsys, option: str, value: str
) -> None:
    a, b = _pair(tmp_path)
    with pytest.raises(SystemExit) as caught:
        main(["diff", a, b, f"{option}={value}"])
    assert caught.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    named = [line for line in err.splitlines() if "error:" in line]
    assert len(named) == 1 and f"argument {option}:" in named[0] and "finite" in named[0], err


@pytest.mark.slow  # the CLI in a child process: seconds
def test_the_refusal_is_one_line_without_a_warning(tmp_path) -> None:
    a, b = _pair(tmp_path)
    result = subprocess.run(
        [sys.executable, "-W", "default", "-m", "trackpoint", "diff", a, b, "--atol", "nan"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("trackpoint diff: error: argument --atol: ")


@pytest.mark.parametrize(
    ("option", "value"), [("--rtol", "0"), ("--atol", "0.5"), ("--atol", "1e-6"), ("--rtol", "0.1")]
)
def test_finite_tolerances_are_taken(tmp_path, capsys, option: str, value: str) -> None:
    a, b = _pair(tmp_path)
    assert main(["diff", a, b, option, value]) == 1  # 1.0 against 2.0: different under each of these
    assert main(["diff", a, b, "--atol", "1"]) == 0
    assert "checkpoints are equal (rtol=0.0, atol=1.0)" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["rtol", "atol"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_the_api_refuses_them_too(tmp_path, name: str, value: float) -> None:
    a, b = _pair(tmp_path)
    with tp.CheckpointView(a) as view, pytest.raises(tp.errors.InvalidArgumentError, match=f"{name}=") as caught:
        view.diff(b, **{name: value})
    assert "finite" in str(caught.value)
