"""Scale workloads for ``python benchmarks/compare.py --scale``: does the cost per variable and per byte stay flat?

    python benchmarks/compare.py --scale --rounds 1 [--no-tf] [--json PATH] [--plot PATH.png]
    python benchmarks/compare.py --scale --quick            # 2k/20k variables, 64/128 MiB: a smoke run

Workloads, in two groups:
  by variable count  float32 variables of 1 KiB (256 elements): 20,000, 200,000 and 1,000,000
  by bytes           float32 variables of 64 MiB, 1, 2, 4 and 8 GiB in all (16 to 128 variables)
(``--counts``, ``--sizes-mib`` and ``--tensor-mib`` replace the sizes; ``--workload 200000x1KiB`` picks one.)

Every size runs through compare.py's machinery: each contender in fresh child processes, interleaved rounds,
the same untimed warm-up (two writes and a read) and ``os.sync()`` before every timed phase, medians. Timed:
write (a synchronous save), read (a restore into the existing variables) and, for trackpoint, its first save
and first read: each with a new Checkpoint and new objects, created untimed just before (no save layout and no
restore record to reuse, as in a process that has just started). Each figure is reported per variable (µs)
or per GiB (s), with the ratio of the largest size's figure to the smallest's: the flatness figure (issue 17
wants ≤ 1.2x).

trackpoint's peak extra memory for a first save and a first restore is measured in a child of its own, by
default as the growth of the peak resident set (``VmHWM`` in /proc/self/status, reset before each phase
through /proc/self/clear_refs, after ``malloc_trim`` returns freed heap to the system): tracemalloc
(``--memory-method tracemalloc``) counts only Python's allocations and slows 1M variables several times. It is
reported as bytes per variable beyond the largest tensor, against issue 17's target of 200 bytes per variable
plus one tensor (or 4 MiB of small ones).

Memory: no contender's child holds source arrays beside its variables (each variable's array is made
directly, one at a time), so a child holds one copy of the checkpoint's values, two while a read into new
memory holds the new ones (TF's restore, trackpoint's where it does not read in place): 16 GiB at 8 GiB.
raw writes and reads its own arrays (it holds no second copy as in the standard workloads),
safetensors+assign copies what it loads into the arrays it saved from. safetensors' ``load_file`` reads the
whole file into memory and makes the arrays from it: three copies at its peak, 24 GiB at 8 GiB, which this
24 GiB machine does not have. Each timed child reports its peak resident set (printed as copies of the
values with the progress lines, in the JSON as ``child_peak_rss``). A contender is skipped at a size, saying
so, when the machine has less memory available than its copies need plus 1 GiB, or less disk free than two
copies plus 1 GiB (so both safetensors rows at 8 GiB).

TensorFlow runs up to 200,000 variables and 4 GiB: each tf.Variable costs about 0.25 ms per phase (creating,
saving, restoring), so one child at 200,000 variables takes 7 minutes and one at 1,000,000 would take about 40;
and beyond 4 GiB its restore would hold 16 GiB on a machine others share. ``--no-tf`` skips it all.

Every child has a timeout (about three times what its phases take here, at least a minute); a child that
runs out of time, or fails, leaves its cells empty ("timed out", "failed") with the reason printed below the
table, and the run goes on.

Duration on the 2-core development VM with ``--rounds 1`` (the default with --scale): 18 minutes with
``--no-tf`` (measured: 7 of them for 1,000,000 variables, 5 for 8 GiB), about 30 with TensorFlow (its child at
200,000 variables alone takes 7.5 minutes); ``--quick`` about a minute (half without TensorFlow). Each further
round adds as much again.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from compare import (
    MiB,
    Raw,
    RawFsync,
    Safetensors,
    SafetensorsAssign,
    TensorFlow,
    Trackpoint,
    child_row,
    measure,
    medians,
    peak_extra_memory,
    time_phases,
)

KiB = 1 << 10
GiB = 1 << 30

COUNTS = (20_000, 200_000, 1_000_000)
SIZES_MIB = (1024, 2048, 4096, 8192)
QUICK_COUNTS = (2_000, 20_000)
QUICK_SIZES_MIB = (64, 128)
SMALL_BYTES = 1 * KiB
TENSOR_MIB = 64

# TensorFlow's limits (see the module docstring).
TF_MAX_VARIABLES = 200_000
TF_MAX_BYTES = 4 * GiB
# What each phase of TF 2.21 costs per variable at 200,000 variables on the development VM (creating them
# 0.25 ms, a save 0.18 ms, a restore 0.27 ms; more per variable than at 2,000).
TF_SECONDS_PER_VARIABLE = 0.25e-3

# Generous costs of one phase (creating the variables, a save, a restore), for the timeouts: seconds per
# variable and per GiB, about three times what each takes on the development VM (TF 2.21: 0.2-0.3 ms per
# variable at 200,000; the others under 8 µs; every contender about 1.3 s per GiB, os.sync() included).
BUDGET = {"tensorflow": (0.8e-3, 4.0)}
DEFAULT_BUDGET = (20e-6, 4.0)

# The rows of the tables: (operation key, label); trackpoint has all four, the others write and read.
OPS = (
    ("write", "write"),
    ("first save", "first save (new objects)"),
    ("read", "read"),
    ("first read", "first read (new objects)"),
)
UNITS = {"variables": "µs per variable", "bytes": "s per GiB"}
# The key of a timed child's own peak resident set in its row (not a timed phase).
PEAK_RSS = "peak_rss"
# The memory target of issue 17: bytes per variable, plus one tensor or this much of small ones.
TARGET_PER_VARIABLE = 200
TARGET_SMALL = 4 * MiB


@dataclass(frozen=True)
class Spec:
    """``count`` float32 variables of ``tensor_bytes`` each; its name (``20000x1KiB``) is what a child gets."""

    count: int
    tensor_bytes: int

    @property
    def name(self) -> str:
        return f"{self.count}x{size_text(self.tensor_bytes, compact=True)}"

    @property
    def total(self) -> int:
        return self.count * self.tensor_bytes

    @classmethod
    def parse(cls, name: str) -> Spec:
        match = re.fullmatch(r"(\d+)x(\d+)(KiB|MiB)", name)
        if match is None:
            raise ValueError(f"not a scale workload: {name!r} (COUNTxSIZE, e.g. 20000x1KiB or 16x64MiB)")
        unit = KiB if match[3] == "KiB" else MiB
        return cls(int(match[1]), int(match[2]) * unit)

    def arrays(self) -> Iterator[np.ndarray]:
        """Each variable's initial value, made only when asked for: nothing holds them but the contender."""
        elements = self.tensor_bytes // 4
        return (np.full(elements, i, np.float32) for i in range(self.count))

    def label(self, group: str) -> str:
        if group == "variables":
            return f"{self.count:,}"
        return size_text(self.total)


def size_text(nbytes: float, compact: bool = False) -> str:
    """1 KiB, 64 MiB, 1 GiB, 1.5 GiB; ``compact`` (workload names) has no space and whole units only."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if compact and unit == "GiB":
            continue
        if abs(nbytes) >= size and (not compact or nbytes % size == 0):
            value = nbytes / size
            return f"{value:g}{unit}" if compact else f"{value:.3g} {unit}"
    return f"{nbytes:.0f}B" if compact else f"{nbytes:.0f} B"


def workload_specs(args: argparse.Namespace) -> dict[str, list[Spec]]:
    """The scale workloads by group, after --counts/--sizes-mib/--tensor-mib and --workload."""

    def numbers(text: str | None, default: tuple[int, ...]) -> list[int]:
        return [int(part) for part in text.split(",")] if text else list(default)

    counts = numbers(args.counts, QUICK_COUNTS if args.quick else COUNTS)
    sizes = numbers(args.sizes_mib, QUICK_SIZES_MIB if args.quick else SIZES_MIB)
    tensor_mib = args.tensor_mib or TENSOR_MIB
    for size in sizes:
        if size % tensor_mib:
            raise SystemExit(f"--sizes-mib {size} is not a whole number of {tensor_mib} MiB variables")
    groups = {
        "variables": [Spec(count, SMALL_BYTES) for count in counts],
        "bytes": [Spec(size // tensor_mib, tensor_mib * MiB) for size in sizes],
    }
    named = set(args.workload or [])
    if any(spec.name in named for specs in groups.values() for spec in specs):
        groups = {group: [spec for spec in specs if spec.name in named] for group, specs in groups.items()}
    return groups


# -- the children ----------------------------------------------------------------------------


class ScaleTrackpoint(Trackpoint):
    """trackpoint's variables made one array at a time; new objects replace the old ones, not join them."""

    def __init__(self, spec: Spec, directory: str) -> None:
        self.spec = spec
        super().__init__([], directory, with_adam=False)

    def source(self) -> Iterator[np.ndarray]:
        return self.spec.arrays()

    def fresh(self) -> None:
        # The old objects go first: at 8 GiB two sets of variables and a restore's new values would not fit.
        if hasattr(self, "ckpt"):
            del self.ckpt, self.model
            gc.collect()
        super().fresh()


class ScaleSafetensorsAssign(SafetensorsAssign):
    """The arrays it saves are the model's own: a read copies into those (no second copy held)."""

    def __init__(self, arrays: Any, directory: str, with_adam: bool) -> None:
        Safetensors.__init__(self, arrays, directory, with_adam)
        self.destinations = self.tensors


class ScaleRaw(Raw):
    hold_copies = False


class ScaleRawFsync(RawFsync):
    hold_copies = False


SCALE_CONTENDERS: dict[str, Any] = {
    "safetensors": Safetensors,
    "safetensors+assign": ScaleSafetensorsAssign,
    "raw": ScaleRaw,
    "raw+fsync": ScaleRawFsync,
    "tensorflow": TensorFlow,
}


def make_contender(name: str, spec: Spec, directory: str) -> Any:
    if name == "trackpoint":
        return ScaleTrackpoint(spec, directory)
    return SCALE_CONTENDERS[name](spec.arrays(), directory, False)


def _proc_bytes(field: str, path: str = "/proc/self/status") -> int:
    """A ``kB`` field of /proc/self/status or /proc/meminfo, in bytes."""
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * KiB
    raise OSError(f"no {field} in {path}")


def _reset_peak_rss() -> bool:
    """Set VmHWM back to the current resident set (Linux ≥ 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _proc_bytes("VmHWM")
    except OSError:
        return False
    return True


def _release_free_memory() -> None:
    """Collect, and hand freed heap back to the system, so that the phase's own allocations raise the RSS."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def peak_rss_growth(make: Callable[[], Trackpoint]) -> tuple[int, int]:
    """Peak resident-set growth beyond the variables during a first save, then a first restore."""
    contender = make()
    results = []
    for action in (contender.write, contender.read):
        _release_free_memory()
        _reset_peak_rss()
        base = _proc_bytes("VmRSS")
        action()
        results.append(_proc_bytes("VmHWM") - base)
    return results[0], results[1]


def memory_row(spec: Spec, directory: str, method: str) -> dict[str, object]:
    """trackpoint's peak extra memory on one workload: a child of its own, nothing else timed."""
    if method == "rss" and not _reset_peak_rss():
        method = "tracemalloc (the peak RSS cannot be reset here)"
    # A save and a restore of two variables first, elsewhere: the imports and one-time set-up they do
    # would otherwise count as the measured save's, which at small sizes is all it would show.
    os.makedirs(os.path.join(directory, "warm-up"), exist_ok=True)
    warm_up = ScaleTrackpoint(Spec(2, SMALL_BYTES), os.path.join(directory, "warm-up"))
    warm_up.write()
    warm_up.read()
    del warm_up
    measure_peak = peak_rss_growth if method == "rss" else peak_extra_memory
    mem_save, mem_read = measure_peak(lambda: ScaleTrackpoint(spec, directory))
    return {"mem_save": mem_save, "mem_read": mem_read, "method": method}


def run_child(
    contender_name: str, workload: str, repeats: int, memory: bool, directory: str, memory_method: str
) -> dict[str, object]:
    """One child process: trackpoint's memory (``memory``), or one contender's timed phases; samples."""
    spec = Spec.parse(workload)
    if memory:
        return memory_row(spec, directory, memory_method)
    contender = make_contender(contender_name, spec, directory)
    row = time_phases(contender, repeats, asynchronous=False, first_save=True)
    # The child's whole peak, variables included: how many copies of the values it held at most.
    row[PEAK_RSS] = [_proc_bytes("VmHWM")]
    return row


# -- the parent ------------------------------------------------------------------------------


def skip_reason(contender: str, spec: Spec) -> str | None:
    if contender != "tensorflow":
        return None
    if spec.count > TF_MAX_VARIABLES:
        minutes = spec.count * TF_SECONDS_PER_VARIABLE * 10 / 60
        return (
            f"TensorFlow runs up to {TF_MAX_VARIABLES:,} variables: at about {TF_SECONDS_PER_VARIABLE * 1e3:g} ms "
            f"per variable and phase (creating, saving, restoring), one child at {spec.count:,} would take about "
            f"{minutes:.0f} minutes"
        )
    if spec.total > TF_MAX_BYTES:
        return (
            f"TensorFlow runs up to {size_text(TF_MAX_BYTES)}: its restore would hold {size_text(2 * spec.total)} "
            "on a shared machine, and the run would overrun its time budget"
        )
    return None


def _available_memory() -> int:
    try:
        return _proc_bytes("MemAvailable", "/proc/meminfo")
    except OSError:
        return sys.maxsize


# How many copies of the values a contender's child holds at its peak (its variables included), measured
# at 1 GiB: safetensors' load_file reads the whole file into memory and makes the arrays from it, beside the
# variables; a restore or load into new memory holds two; raw reads one tensor at a time.
COPIES = {"safetensors": 3, "safetensors+assign": 3, "raw": 1, "raw+fsync": 1}


def resources_reason(contender: str, spec: Spec, directory: str) -> str | None:
    """Why this machine cannot run the contender on the workload now: memory for its copies of the values
    (``COPIES``) and disk for two files (trackpoint's atomic save writes the new file beside the old one)."""
    copies = COPIES.get(contender, 2)
    need = copies * spec.total + GiB
    memory = _available_memory()
    if memory < need:
        return (
            f"needs about {size_text(need)} of memory ({copies} copies of the values at its peak), "
            f"{size_text(memory)} available"
        )
    need = 2 * spec.total + GiB
    disk = shutil.disk_usage(directory).free
    if disk < need:
        return f"needs about {size_text(need)} of disk, {size_text(disk)} free"
    return None


def child_timeout(contender: str, spec: Spec, repeats: int, memory: bool = False) -> float:
    """A generous estimate of one child, at least a minute: creating the variables, the warm-up, every
    phase (trackpoint's first save and first read each make new objects first)."""
    per_variable, per_gib = BUDGET.get(contender, DEFAULT_BUDGET)
    phase = spec.count * per_variable + spec.total / GiB * per_gib
    if memory:
        phases = 3
    else:
        phases = 1 + 3 + 2 * repeats + (4 * repeats if contender == "trackpoint" else 0)
    return max(60.0, phase * phases)


def run(args: argparse.Namespace, names: list[str], repeats: int, rounds: int) -> dict[str, Any]:
    """Every scale workload, with progress printed as each finishes, then the tables; the results."""
    groups = workload_specs(args)
    print(
        f"scale: {rounds} round(s) x {repeats} repetitions per contender, medians; each timed phase after "
        "os.sync(), the same warm-up for every contender. No child holds source arrays beside its variables; "
        "one is skipped where its peak (safetensors' load_file: three copies) would not fit in memory.\n"
    )
    start = time.perf_counter()
    out: dict[str, Any] = {"memory_method": args.memory_method, "groups": {}}
    for group, specs in groups.items():
        rows = out["groups"][group] = []
        for spec in specs:
            rows.append(run_workload(spec, group, names, repeats, rounds, args.memory_method))
            print(f"[{time.perf_counter() - start:7.1f} s] {progress_line(rows[-1], group)}", flush=True)
    summarize(out)
    for table in out["tables"].values():
        print("\n" + table)
    out["seconds"] = time.perf_counter() - start
    if not args.no_plot:
        here = os.path.dirname(os.path.abspath(__file__))
        path = args.plot or os.path.join(here, os.pardir, "docs", "images", "scale.png")  # shown in the docs
        print("\n" + plot(out, path))
    return out


def new_row(spec: Spec, group: str) -> dict[str, Any]:
    """One size's results, empty: filled by ``add_samples`` and ``add_memory``."""
    return {
        "workload": spec.name,
        "label": spec.label(group),
        "count": spec.count,
        "tensor_bytes": spec.tensor_bytes,
        "bytes": spec.total,
        "contenders": {},
        "skipped": {},
        "memory": None,
    }


def add_samples(row: dict[str, Any], group: str, samples: dict[str, dict[str, list[float]]]) -> None:
    """Each contender's samples, medians and medians per unit (µs per variable, s per GiB), and the
    largest peak resident set of its children."""
    per = row["count"] / 1e6 if group == "variables" else row["bytes"] / GiB
    samples = {contender: dict(ops) for contender, ops in samples.items()}
    for contender, ops in samples.items():
        if PEAK_RSS in ops:
            row.setdefault("child_peak_rss", {})[contender] = max(ops.pop(PEAK_RSS))
    for contender, ops in medians(samples).items():
        if ops:
            row["contenders"][contender] = {
                "samples": samples[contender],
                "median": ops,
                "per_unit": {op: value / per for op, value in ops.items()},
            }


def add_memory(row: dict[str, Any], memory: dict[str, Any]) -> None:
    """trackpoint's peaks (a memory child's row), per variable beyond the largest tensor and against the target."""
    count, largest = row["count"], row["tensor_bytes"]
    allowed = TARGET_PER_VARIABLE * count + max(largest, TARGET_SMALL)
    row["memory"] = {
        **memory,
        "largest": largest,
        "save_per_variable": (memory["mem_save"] - largest) / count,
        "read_per_variable": (memory["mem_read"] - largest) / count,
        "allowed": allowed,
        "save_within": memory["mem_save"] <= allowed,
        "read_within": memory["mem_read"] <= allowed,
    }


def summarize(results: dict[str, Any]) -> None:
    """Add the flatness figures and the Markdown tables to the results of every size."""
    results["flatness"] = {group: flatness(group, rows) for group, rows in results["groups"].items()}
    results["tables"] = markdown_tables(results)


def run_workload(spec: Spec, group: str, names: list[str], repeats: int, rounds: int, method: str) -> dict[str, Any]:
    start = time.perf_counter()
    row = new_row(spec, group)
    root = tempfile.mkdtemp(prefix=f"tp-scale-{spec.name}-")
    try:
        runnable = []
        for contender in names:
            why = skip_reason(contender, spec) or resources_reason(contender, spec, root)
            if why is None:
                runnable.append(contender)
            else:
                row["skipped"][contender] = why

        def command(contender: str, round_index: int, memory: bool = False) -> list[str]:
            # One directory for every child in turn, emptied for each: an 8 GiB workload leaves no files behind.
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
            command = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare.py")]
            command += ["--child", contender, spec.name, "--repeats", str(repeats), "--dir", root]
            return command + (["--memory", "--memory-method", method] if memory else [])

        if runnable:
            samples, _, failures = measure(
                runnable, rounds, command, timeout=lambda contender: child_timeout(contender, spec, repeats)
            )
            row["skipped"].update(failures)
            add_samples(row, group, {c: ops for c, ops in samples.items() if c not in failures})
        if "trackpoint" in runnable and "trackpoint" not in row["skipped"]:
            try:
                memory = child_row(
                    command("trackpoint", 0, memory=True), child_timeout("trackpoint", spec, repeats, memory=True)
                )
            except (subprocess.SubprocessError, ValueError, IndexError) as error:  # timed out, failed: say so, go on
                row["memory_error"] = f"{type(error).__name__}: {str(error)[-200:]}"
            else:
                add_memory(row, memory)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    row["seconds"] = time.perf_counter() - start
    return row


def progress_line(row: dict[str, Any], group: str) -> str:
    parts = []
    for contender, result in row["contenders"].items():
        cells = ", ".join(f"{op} {result['median'][op]:.3f} s" for op, _ in OPS if op in result["median"])
        parts.append(f"{contender}: {cells}")
    parts += [f"{contender} skipped ({why})" for contender, why in row["skipped"].items()]
    peaks = row.get("child_peak_rss", {})
    if peaks:
        copies = ", ".join(f"{contender} {peak / row['bytes']:.1f}" for contender, peak in peaks.items())
        parts.append(f"children's peak RSS in copies of the values: {copies}")
    return f"{group} {row['label']} ({row['seconds']:.0f} s): " + "; ".join(parts)


def flatness(group: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per contender and operation: the figure per unit at the largest size it ran over the smallest's."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    contenders = dict.fromkeys(c for row in rows for c in row["contenders"])
    for contender in contenders:
        for op, _ in OPS:
            points = [
                (_size(group, row), row["label"], value)
                for row in rows
                if (value := row["contenders"].get(contender, {}).get("per_unit", {}).get(op)) is not None
            ]
            if len(points) < 2:
                continue
            smallest, largest = min(points), max(points)
            out.setdefault(contender, {})[op] = {
                "ratio": largest[2] / smallest[2],
                "from": smallest[1],
                "to": largest[1],
                "complete": len(points) == len(rows),
            }
    return out


def _size(group: str, row: dict[str, Any]) -> int:
    return row["count"] if group == "variables" else row["bytes"]


def _row_sizes(group: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: _size(group, row))


def _title(group: str, rows: list[dict[str, Any]]) -> str:
    if group == "variables":
        return f"By variable count: float32 variables of {size_text(rows[0]['tensor_bytes'])}"
    return f"By size: float32 variables of {size_text(rows[0]['tensor_bytes'])}"


def _cell_gap(why: str) -> str:
    """What an empty cell says: its contender was skipped there, ran out of time or failed."""
    return "timed out" if why.startswith("timed out") else "failed" if why.startswith("failed") else "skipped"


def markdown_tables(results: dict[str, Any]) -> dict[str, str]:
    """The scale tables in Markdown, ready for the README: one per group, and trackpoint's memory."""
    tables = {}
    for group, rows in results["groups"].items():
        if not rows:
            continue
        rows = _row_sizes(group, rows)
        contenders = dict.fromkeys(c for row in rows for c in (*row["contenders"], *row["skipped"]))
        head = f"{rows[-1]['label']} / {rows[0]['label']}" if len(rows) > 1 else "largest / smallest"
        lines = [
            f"{_title(group, rows)}: {UNITS[group]} (median seconds in all)",
            "",
            "| contender | operation | " + " | ".join(row["label"] for row in rows) + f" | {head} |",
            "|---|---|" + "---|" * (len(rows) + 1),
        ]
        ratios = results["flatness"].get(group, {})
        for contender in contenders:
            ops = [
                op for op, _ in OPS if any(op in row["contenders"].get(contender, {}).get("median", {}) for row in rows)
            ]
            if not ops:  # skipped at every size: one row saying so
                ops = ["write", "read"]
            for op in ops:
                cells = []
                for row in rows:
                    result = row["contenders"].get(contender)
                    if result is None or op not in result["median"]:
                        why = row["skipped"].get(contender)
                        cells.append("" if why is None else _cell_gap(why))
                        continue
                    unit, total = result["per_unit"][op], result["median"][op]
                    seconds = f"{total:.3f}" if total < 10 else f"{total:.1f}"
                    cells.append(f"{unit:.2f} ({seconds} s)" if group == "variables" else f"{unit:.3f} ({seconds} s)")
                ratio = ratios.get(contender, {}).get(op)
                flat = (
                    ""
                    if ratio is None
                    else f"{ratio['ratio']:.2f}x" + ("" if ratio["complete"] else f" (to {ratio['to']})")
                )
                label = dict(OPS)[op]
                lines.append(f"| {contender} | {label} | " + " | ".join(cells) + f" | {flat} |")
        notes = [f"- {contender} at {row['label']}: {why}" for row in rows for contender, why in row["skipped"].items()]
        lines += ([""] + notes) if notes else []
        tables[group] = "\n".join(lines)
    memory_rows = [(group, row) for group, rows in results["groups"].items() for row in _row_sizes(group, rows) if rows]
    if memory_rows:
        method = next((row["memory"]["method"] for _, row in memory_rows if row["memory"]), results["memory_method"])
        how = (
            "peak resident-set growth (VmHWM) over the variables, in a child of its own"
            if method == "rss"
            else f"{method}: Python's peak traced allocations beyond the variables"
        )
        lines = [
            (
                f"trackpoint's peak extra memory, first save and first restore ({how}); per variable beyond the "
                f"largest tensor; target: {TARGET_PER_VARIABLE} B per variable plus the largest tensor or "
                f"{size_text(TARGET_SMALL)}, whichever is more"
            ),
            "",
            "| workload | save | per variable | restore | per variable | within target (save, restore) |",
            "|---|---|---|---|---|---|",
        ]
        for group, row in memory_rows:
            name = f"{row['count']:,} x {size_text(row['tensor_bytes'])}"
            name = name if group == "variables" else f"{row['label']} ({name})"
            memory = row["memory"]
            if memory is None:
                why = row.get("memory_error") or row["skipped"].get("trackpoint", "not measured")
                lines.append(f"| {name} | {why} | | | | |")
                continue
            yes = {True: "yes", False: "no"}
            # A peak below the largest tensor is nothing beyond it.
            save, read = (size_text(max(0.0, memory[key])) for key in ("save_per_variable", "read_per_variable"))
            lines.append(
                f"| {name} | {size_text(memory['mem_save'])} | {save} | {size_text(memory['mem_read'])} | {read} | "
                f"{yes[memory['save_within']]}, {yes[memory['read_within']]} |"
            )
        tables["memory"] = "\n".join(lines)
    return tables


# The plotted lines: contender, operation, style.
LINES = (
    ("trackpoint", "write", {"color": "C0", "linestyle": "-"}),
    ("trackpoint", "first save", {"color": "C0", "linestyle": "--"}),
    ("trackpoint", "read", {"color": "C1", "linestyle": "-"}),
    ("trackpoint", "first read", {"color": "C1", "linestyle": "--"}),
    ("safetensors", "write", {"color": "C2", "linestyle": "-"}),
    ("safetensors", "read", {"color": "C2", "linestyle": ":"}),
    ("tensorflow", "write", {"color": "C3", "linestyle": "-"}),
    ("tensorflow", "read", {"color": "C3", "linestyle": ":"}),
    ("raw+fsync", "write", {"color": "0.6", "linestyle": "-"}),
    ("raw", "read", {"color": "0.6", "linestyle": ":"}),
)


def plot(results: dict[str, Any], path: str) -> str:
    """Draw time per unit against size, log-log, one panel per group; what happened, as a line to print."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (python -m pip install -e '.[bench]')"
    groups = [(group, rows) for group, rows in results["groups"].items() if rows]
    if not groups:
        return "no plot: no scale workload ran"
    figure, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 5), squeeze=False)
    for axis, (group, rows) in zip(axes[0], groups):
        rows = _row_sizes(group, rows)
        for contender, op, style in LINES:
            points = [
                (row["count"] if group == "variables" else row["bytes"] / GiB, value)
                for row in rows
                if (value := row["contenders"].get(contender, {}).get("per_unit", {}).get(op)) is not None
            ]
            if points:
                xs, ys = zip(*points)
                axis.plot(xs, ys, marker="o", label=f"{contender} {op}", **style)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xticks(
            [row["count"] if group == "variables" else row["bytes"] / GiB for row in rows],
            [f"{row['count']:,}" if group == "variables" else size_text(row["bytes"]) for row in rows],
        )
        axis.minorticks_off()
        axis.set_xlabel("variables" if group == "variables" else "checkpoint size, GiB")
        axis.set_ylabel(UNITS[group])
        axis.set_title(_title(group, rows))
        axis.grid(True, which="both", alpha=0.3)
    # One legend for both panels, below them: the lines are the same in each.
    legend = {label: handle for axis in axes[0] for handle, label in zip(*axis.get_legend_handles_labels())}
    figure.legend(legend.values(), legend.keys(), loc="lower center", ncol=5, fontsize=8, frameon=False)
    figure.suptitle("Time per variable and per GiB (flat is good): write, read, first save/read into new objects")
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"plot written to {path}"
