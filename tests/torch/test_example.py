"""examples/torch_resume.py runs, and its resumed run ends where an uninterrupted one does."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "torch_resume.py"


@pytest.mark.slow  # the example scripts in child processes: seconds
def test_the_torch_resume_example_resumes_bit_for_bit(tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("torch_resume", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.run(str(tmp_path)) is True
    assert "bit for bit: True" in capsys.readouterr().out
