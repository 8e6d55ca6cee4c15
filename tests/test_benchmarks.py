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


@pytest.mark.interop  # compare.py runs TensorFlow as one contender
# One workload per test, so that pytest-xdist spreads the three over the cores (together they were the
# longest test of the suite); run together, the three are one ``compare.py --quick``.
@pytest.mark.parametrize("workload", ["large", "many", "mixed"])
def test_compare_quick_runs_every_contender(workload: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "compare.py"),
            "--quick",
            "--repeats",
            "1",
            "--workload",
            workload,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for contender in ("trackpoint", "tensorflow", "safetensors", "raw", "raw+fsync"):
        assert any(line.split()[:2] == [workload, contender] for line in result.stdout.splitlines()), (
            workload,
            contender,
            result.stdout,
        )
    assert result.stdout.count("trackpoint/tensorflow:") == 1


def test_async_benchmark_quick_runs() -> None:
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "async_save.py"), "--quick", "--repeats", "1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.splitlines()[1].split()[0] == "large"


def test_torch_benchmark_quick_runs_every_contender(tmp_path) -> None:
    out = tmp_path / "torch.json"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "torch_compare.py"), "--quick", "--workload", "large"]
        + ["--rounds", "1", "--repeats", "1", "--json", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for contender in ("trackpoint", "torch.save", "torch.save+fsync", "dcp", "safetensors"):
        assert any(line.startswith(f"| {contender} |") for line in result.stdout.splitlines()), result.stdout
    import json

    runs = json.loads(out.read_text())["large"]
    assert runs["trackpoint"][0]["async"] and runs["dcp"][0]["async"] and not runs["torch.save"][0]["async"]
    # Restores into fresh objects, for those that can fill an optimizer with no state (issue 39).
    assert all(runs[name][0]["fresh"] and runs[name][0]["mem_fresh"] for name in ("trackpoint", "torch.save"))
    assert "fresh" not in runs["dcp"][0]
    assert "Restore into fresh objects" in result.stdout


def test_remote_compare_quick_runs_every_contender() -> None:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "remote_compare.py"), "--quick", "--rounds", "1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for row in (
        "| save / put |",
        "| restore / get |",
        "| restore into fresh variables / get |",
        "| one tensor / ranged cat |",
    ):
        assert result.stdout.count(row) == 2, result.stdout  # large and many


def test_remote_downloads_quick_runs_both_contenders() -> None:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "remote_downloads.py"), "--quick"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for row in ("| download process |", "| thread |", "| s3fs get |"):
        assert row in result.stdout, result.stdout


def test_remote_floor_runs_every_contender() -> None:
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "remote_floor.py"), "--rounds", "1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for row in ("| get |", "| local restore |", "| both, serial |", "| both, overlapped |"):
        assert row in result.stdout, result.stdout


@pytest.mark.skipif(
    importlib.util.find_spec("orbax") is None or importlib.util.find_spec("jax") is None,
    reason="needs JAX and orbax-checkpoint",
)
def test_jax_benchmark_quick_runs_every_contender() -> None:
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "jax_compare.py"),
            "--quick",
            "--repeats",
            "1",
            "--workloads",
            "many",  # large runs the same code with larger leaves; memory, the same saves once each
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith(("| many", "| large"))]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [("many", "save"), ("many", "restore")]
    assert all(float(r[i]) > 0 for r in rows for i in (2, 3, 4))


def _incremental_rows(script: str) -> dict[str, list[str]]:
    """Run an incremental benchmark with ``--quick``; its table's cells by contender."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", script), "--quick"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = {
        line.split("|")[1].strip(): line.split("|")[2:-1]
        for line in result.stdout.splitlines()
        if line.startswith("| ")
    }
    assert {"full", "incremental", "incremental / full"} <= set(rows), result.stdout
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
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "async_interference.py"), "--quick"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]) for line in result.stdout.splitlines()}
    for loop in ("torch", "numpy"):
        for mode in ("async", "async-process", "torch.save", "sync"):
            assert (loop, mode) in rows, result.stdout
    assert "| async-process |" in result.stdout  # the blocked-time row of the writer process


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None, reason="needs 2 CPUs and taskset"
)
def test_vcpu_neighbours_quick_measures_a_share_per_cpu() -> None:
    script = os.path.join(ROOT, "benchmarks", "vcpu_neighbours.py")
    result = subprocess.run(
        [sys.executable, script, "--quick", "--kinds", "spin"], check=False, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| spin |")]
    assert all(float(cell) > 0 for cell in row.split("|")[2:4]), result.stdout
