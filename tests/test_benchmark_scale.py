"""``benchmarks/compare.py --scale`` (benchmarks/scale.py): its tables, JSON and plot have every expected row.

Smoke only: speed is measured by running the benchmark, never asserted here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
COMPARE = os.path.join(BENCHMARKS, "compare.py")

NO_TF = ["trackpoint", "safetensors", "safetensors+assign", "raw", "raw+fsync"]
# The operations each contender has a row for.
OPS = {name: ["write", "read"] for name in NO_TF + ["tensorflow"]}
OPS["trackpoint"] = ["write", "first save (new objects)", "read", "first read (new objects)"]


@pytest.fixture
def scale() -> Iterator[ModuleType]:
    """benchmarks/scale.py (which imports benchmarks/compare.py by name), imported for this test only."""
    sys.path.insert(0, BENCHMARKS)
    try:
        import scale

        yield scale
    finally:
        sys.path.remove(BENCHMARKS)
        for name in ("scale", "compare"):
            sys.modules.pop(name, None)


def table_rows(table: str) -> list[list[str]]:
    """The body rows of a Markdown table, as lists of stripped cells."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def check_results(results: dict[str, Any], counts: list[int], sizes: list[int], names: list[str]) -> None:
    """Every size of both groups in the JSON, every contender and operation a row of its group's table with
    a cell for every size and a flatness figure, and a memory row for every size."""
    groups = results["groups"]
    assert [row["count"] for row in groups["variables"]] == counts
    assert [row["bytes"] for row in groups["bytes"]] == sizes
    for group, rows in groups.items():
        for row in rows:
            assert set(row["contenders"]) | set(row["skipped"]) == set(names), (group, row["label"])
            for contender, result in row["contenders"].items():
                expected = {"write", "read"} | ({"first save", "first read"} if contender == "trackpoint" else set())
                assert set(result["median"]) == expected == set(result["per_unit"]), (contender, row["label"])
            assert row["memory"] is not None, row
        table = results["tables"][group]
        body = table_rows(table)
        assert [cells[:2] for cells in body] == [[name, op] for name in names for op in OPS[name]], table
        for cells in body:
            assert len(cells) == 2 + len(rows) + 1, cells
            assert all(cells[2:]), cells  # a figure (or "skipped") in every cell, the flatness figure last
            assert cells[-1].endswith("x") or "x (to " in cells[-1] or cells[-1] == "", cells
        flat = results["flatness"][group]
        assert set(flat["trackpoint"]) == {"write", "first save", "read", "first read"}
    memory = table_rows(results["tables"]["memory"])
    assert len(memory) == len(counts) + len(sizes), results["tables"]["memory"]
    assert all(len(cells) == 6 and cells[-1] in {"yes, yes", "yes, no", "no, yes", "no, no"} for cells in memory)


def fake_results(scale: ModuleType, counts: list[int], sizes_mib: list[int], tf_limit: int) -> dict[str, Any]:
    """Results as run() gathers them, with made-up samples; TensorFlow skipped beyond ``tf_limit`` variables."""
    results: dict[str, Any] = {"memory_method": "rss", "groups": {"variables": [], "bytes": []}}
    specs = [("variables", scale.Spec(n, 1024)) for n in counts]
    specs += [("bytes", scale.Spec(size, 1 << 20)) for size in sizes_mib]
    for group, spec in specs:
        row = scale.new_row(spec, group)
        samples = {}
        for name in NO_TF + ["tensorflow"]:
            if name == "tensorflow" and spec.count > tf_limit:
                row["skipped"][name] = scale.skip_reason(name, scale.Spec(10 * scale.TF_MAX_VARIABLES, 1024))
                continue
            ops = ["write", "read"] + (["first save", "first read"] if name == "trackpoint" else [])
            samples[name] = {op: [1e-6 * spec.count, 3e-6 * spec.count] for op in ops}
        scale.add_samples(row, group, samples)
        scale.add_memory(row, {"mem_save": 100 * spec.count, "mem_read": spec.total, "method": "rss"})
        results["groups"][group].append(row)
    scale.summarize(results)
    return results


def test_tables_have_every_row_and_a_figure_in_each_cell(scale: ModuleType, tmp_path: Any) -> None:
    results = fake_results(scale, [100, 1000, 10000], [2, 4], tf_limit=1000)
    check_results(results, [100, 1000, 10000], [2 << 20, 4 << 20], NO_TF + ["tensorflow"])
    variables = table_rows(results["tables"]["variables"])
    tf_write = next(cells for cells in variables if cells[:2] == ["tensorflow", "write"])
    assert tf_write[2:] == ["2.00 (0.000 s)", "2.00 (0.002 s)", "skipped", "1.00x (to 1,000)"]
    assert "- tensorflow at 10,000: TensorFlow runs up to 200,000 variables" in results["tables"]["variables"]
    json.dumps(results)  # what --json writes
    message = scale.plot(results, str(tmp_path / "scale.png"))
    assert message.startswith(("plot written to", "no plot: matplotlib is not installed"))


def test_the_workloads_are_the_issue_s_sizes(scale: ModuleType) -> None:
    def specs(*argv: str) -> dict[str, list[str]]:
        parser = argparse.ArgumentParser()
        for flag in ("--counts", "--sizes-mib"):
            parser.add_argument(flag)
        parser.add_argument("--tensor-mib", type=int)
        parser.add_argument("--quick", action="store_true")
        parser.add_argument("--workload", action="append")
        groups = scale.workload_specs(parser.parse_args(argv))
        return {group: [spec.name for spec in group_specs] for group, group_specs in groups.items()}

    assert specs() == {
        "variables": ["20000x1KiB", "200000x1KiB", "1000000x1KiB"],
        "bytes": ["16x64MiB", "32x64MiB", "64x64MiB", "128x64MiB"],
    }
    assert specs("--quick") == {"variables": ["2000x1KiB", "20000x1KiB"], "bytes": ["1x64MiB", "2x64MiB"]}
    assert specs("--workload", "200000x1KiB", "--workload", "many") == {"variables": ["200000x1KiB"], "bytes": []}
    assert scale.Spec.parse("128x64MiB").total == 8 << 30
    tf = [scale.skip_reason("tensorflow", scale.Spec.parse(name)) is None for name in specs()["variables"]]
    assert tf == [True, True, False]
    tf = [scale.skip_reason("tensorflow", scale.Spec.parse(name)) is None for name in specs()["bytes"]]
    assert tf == [True, True, True, False]


def test_a_contender_whose_peak_would_not_fit_is_skipped(
    scale: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(scale, "_available_memory", lambda: 22 << 30)
    monkeypatch.setattr(scale.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100 << 30, 0, 100 << 30))
    largest, second = scale.Spec.parse("128x64MiB"), scale.Spec.parse("64x64MiB")
    fits = {name: scale.resources_reason(name, largest, str(tmp_path)) is None for name in NO_TF}
    assert fits == {
        "trackpoint": True,
        "safetensors": False,
        "safetensors+assign": False,
        "raw": True,
        "raw+fsync": True,
    }
    assert "3 copies of the values" in scale.resources_reason("safetensors", largest, str(tmp_path))
    assert all(scale.resources_reason(name, second, str(tmp_path)) is None for name in NO_TF)


@pytest.mark.slow  # 24 child processes: about 8 s
def test_scale_quick_smoke_run_prints_every_row_and_writes_the_json(tmp_path: Any) -> None:
    json_path, png = tmp_path / "scale.json", tmp_path / "scale.png"
    command = [sys.executable, COMPARE, "--scale", "--quick", "--no-tf", "--rounds", "1", "--repeats", "1"]
    command += ["--counts", "100,1000", "--sizes-mib", "2,4", "--tensor-mib", "1"]
    command += ["--json", str(json_path), "--plot", str(png)]
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(json_path.read_text())
    assert "standard" not in results  # --scale alone runs only the scale workloads
    check_results(results["scale"], [100, 1000], [2 << 20, 4 << 20], NO_TF)
    for table in results["scale"]["tables"].values():
        assert table in result.stdout  # the printed tables are the ones in the JSON
    assert "plot written to" in result.stdout or "matplotlib is not installed" in result.stdout
