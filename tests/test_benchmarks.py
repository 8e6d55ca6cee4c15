"""The benchmark scripts run (smoke only: speed is measured by running them, never asserted)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each runs a benchmark script in a child process: tens of seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``benchmarks/<script>`` with ``args`` in a child process; its standard output (it must succeed)."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.interop  # compare.py runs TensorFlow as one contender
# One workload per test, so that pytest-xdist spreads the three over the cores (together they were the
# longest test of the suite); run together, the three are one ``compare.py --quick``.
@pytest.mark.parametrize("workload", ["large", "many", "mixed"])
def test_compare_quick_runs_every_contender(workload: str) -> None:
    stdout = _run("compare.py", "--quick", "--repeats", "1", "--workload", workload)
    for contender in ("trackpoint", "tensorflow", "safetensors", "raw", "raw+fsync"):
        assert any(line.split()[:2] == [workload, contender] for line in stdout.splitlines()), (
            workload,
            contender,
            stdout,
        )
    assert stdout.count("trackpoint/tensorflow:") == 1


def test_async_benchmark_quick_runs() -> None:
    stdout = _run("async_save.py", "--quick", "--repeats", "1", timeout=300)
    assert stdout.splitlines()[1].split()[0] == "large"


def test_torch_benchmark_quick_runs_every_contender(tmp_path) -> None:
    out = tmp_path / "torch.json"
    stdout = _run(
        "torch_compare.py", "--quick", "--workload", "large", "--rounds", "1", "--repeats", "1", "--json", str(out)
    )
    for contender in ("trackpoint", "torch.save", "torch.save+fsync", "dcp", "safetensors"):
        assert any(line.startswith(f"| {contender} |") for line in stdout.splitlines()), stdout
    import json

    runs = json.loads(out.read_text())["large"]
    assert runs["trackpoint"][0]["async"] and runs["dcp"][0]["async"] and not runs["torch.save"][0]["async"]
    # Restores into fresh objects, for those that can fill an optimizer with no state (issue 39).
    assert all(runs[name][0]["fresh"] and runs[name][0]["mem_fresh"] for name in ("trackpoint", "torch.save"))
    assert "fresh" not in runs["dcp"][0]
    assert "Restore into fresh objects" in stdout


def test_remote_compare_quick_runs_every_contender() -> None:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    stdout = _run("remote_compare.py", "--quick", "--rounds", "1")
    for row in (
        "| save / put |",
        "| restore / get |",
        "| restore into fresh variables / get |",
        "| one tensor / ranged cat |",
    ):
        assert stdout.count(row) == 2, stdout  # large and many


def test_remote_downloads_quick_runs_both_contenders() -> None:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    stdout = _run("remote_downloads.py", "--quick")
    for row in ("| download process |", "| thread |", "| s3fs get |"):
        assert row in stdout, stdout


def test_remote_floor_runs_every_contender() -> None:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    stdout = _run("remote_floor.py", "--rounds", "1")
    for row in ("| get |", "| local restore |", "| both, serial |", "| both, overlapped |"):
        assert row in stdout, stdout


@pytest.mark.skipif(
    importlib.util.find_spec("orbax") is None or importlib.util.find_spec("jax") is None,
    reason="needs JAX and orbax-checkpoint",
)
def test_jax_benchmark_quick_runs_every_contender() -> None:
    # large runs the same code with larger leaves; memory, the same saves once each
    stdout = _run("jax_compare.py", "--quick", "--repeats", "1", "--workloads", "many")
    rows = [line.split("|")[1:-1] for line in stdout.splitlines() if line.startswith(("| many", "| large"))]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [("many", "save"), ("many", "restore")]
    assert all(float(r[i]) > 0 for r in rows for i in (2, 3, 4))


def _incremental_rows(script: str) -> dict[str, list[str]]:
    """Run an incremental benchmark with ``--quick``; its table's cells by contender."""
    stdout = _run(script, "--quick", timeout=300)
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in stdout.splitlines() if line.startswith("| ")}
    assert {"full", "incremental", "incremental / full"} <= set(rows), stdout
    return rows


def test_incremental_benchmark_quick_runs_both_contenders() -> None:
    rows = _incremental_rows("incremental.py")
    assert float(rows["full"][0]) > 0 and float(rows["incremental"][1]) > 0, rows


def test_incremental_s3_benchmark_quick_runs_both_contenders() -> None:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    rows = _incremental_rows("incremental_s3.py")
    # Bytes, not time: 3 of the 6 objects changed, the 3 others copied on the server.
    assert 0 < float(rows["incremental / full"][0]) < 0.6, rows


def test_async_interference_quick_runs_every_mode() -> None:
    stdout = _run("async_interference.py", "--quick")
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]) for line in stdout.splitlines()}
    for loop in ("torch", "numpy"):
        for mode in ("async", "async-process", "async-paced", "torch.save", "sync"):
            assert (loop, mode) in rows, stdout
    assert "| async-process |" in stdout  # the blocked-time row of the writer process


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None, reason="needs 2 CPUs and taskset"
)
def test_vcpu_neighbours_quick_measures_a_share_per_cpu() -> None:
    stdout = _run("vcpu_neighbours.py", "--quick", "--kinds", "spin", timeout=300)
    (row,) = [line for line in stdout.splitlines() if line.startswith("| spin |")]
    assert all(float(cell) > 0 for cell in row.split("|")[2:4]), stdout


def test_report_benchmark_quick_times_every_phase() -> None:
    stdout = _run("report.py", "--quick", timeout=300)
    rows = [line.split("|")[1].strip() for line in stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert rows == ["read", "report", "read both", "diff"], stdout
