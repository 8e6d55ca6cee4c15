"""``benchmarks/convert.py``: a tiny run prints a row for every operation and cache state, within the memory bound.

Smoke only: speed is measured by running the benchmark, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "convert.py")


@pytest.mark.slow  # 12 child processes: a few seconds
def test_a_tiny_run_has_every_row_and_stays_within_the_memory_bound(tmp_path) -> None:
    out = tmp_path / "samples.json"
    command = [sys.executable, SCRIPT, "--tensors", "3", "--tensor-mib", "1", "--rounds", "1", "--json", str(out)]
    result = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    table = {(cells[0].split(" (")[0].strip(), cells[1].strip()): cells for cells in rows[1:]}
    absent = (
        result.stdout.split("not measured (not in this tree): ")[1].split() if "not measured" in result.stdout else []
    )
    expected = {"cp tf", "tf->st", "cp st", "st->tf", "rewrite", "cp a+b", "average"} - {
        name.strip(",") for name in absent
    }
    assert {operation for operation, _ in table} == expected
    assert {cache for _, cache in table} == {"cold", "warm"}
    doc = json.loads(out.read_text())
    bound = doc["sizes"]["largest"] + 64 * (1 << 20)
    for cache in ("cold", "warm"):
        for operation in ("tf->st", "st->tf"):
            (sample,) = doc["samples"][cache][operation]
            assert sample["seconds"] > 0 and 0 <= sample["peak_extra"] <= bound
        assert table[("tf->st", cache)][4].strip().endswith("x")  # the ratio against cp is printed
        assert "x cp tf)" in table[("average", cache)][4]  # average: against both inputs' cp, and one's
