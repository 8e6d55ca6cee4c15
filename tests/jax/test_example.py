"""examples/jax_resume.py runs, and its resumed run's losses are an uninterrupted run's, bit for bit."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "jax_resume.py"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("flax") is None, reason="needs flax and optax")
def test_the_jax_resume_example_resumes_bit_for_bit(tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("jax_resume", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.run(str(tmp_path)) is True
    assert "bit for bit: True" in capsys.readouterr().out
