"""Thousands of mutated checkpoints, under an address-space limit: only trackpoint errors come out."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # crash, kill and fuzz runs take seconds: not in the inner loop

WORKER = os.path.join(os.path.dirname(__file__), "fuzz_worker.py")
EXAMPLES = int(os.environ.get("TP_FUZZ_EXAMPLES", "2500"))
ADDRESS_SPACE = 3 << 30


def test_fuzz_mutated_checkpoints_under_a_memory_limit() -> None:
    result = subprocess.run(
        [sys.executable, WORKER, str(ADDRESS_SPACE), str(EXAMPLES)],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    assert f"fuzz: {EXAMPLES} cases, only trackpoint errors" in result.stdout
