"""trackpoint.jax vs Orbax (``orbax.checkpoint.StandardCheckpointer``), side by side, on one pytree.

    python benchmarks/jax_compare.py            # both workloads and the memory of a 1 GiB save, 3 rounds
    python benchmarks/jax_compare.py --quick    # a smoke run

Workloads (a dict pytree of float32 ``jax.Array``s on the CPU backend):
  many    2,000 leaves of 1 KiB (256 floats)
  large   8 leaves of 64 MiB: 512 MiB
  memory  one leaf of 1 GiB: how far a save raises the process's peak RSS (reset just before
          the save through ``/proc/self/clear_refs``), as a multiple of the array

Contenders:
  trackpoint     ``trackpoint.jax.Checkpoint(state=tree).write(prefix)`` (durable: fsync, rename) /
                 ``trackpoint.jax.restore(prefix, target)`` into ShapeDtypeStructs
  orbax          ``StandardCheckpointer().save(path, tree, force=True)`` + ``wait_until_finished()`` /
                 ``.restore(path, target)`` into the same ShapeDtypeStructs; it does not fsync
  orbax+fsync    the same, then every file and directory it wrote fsynced: durable, as trackpoint is

Each round runs every contender in a fresh process (contenders interleaved, rounds alternating
their order); in it: one untimed save and restore, then ``--repeats`` timed saves (each after
``os.sync()``, into a fresh path) and ``--repeats`` timed restores (the files in the page cache from
the save before). Medians over rounds and repeats; the ratio is Orbax's time over trackpoint's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

CONTENDERS = ("trackpoint", "orbax", "orbax+fsync")
WORKLOADS = {"many": (2000, 256), "large": (8, 16 << 20)}  # leaves, floats per leaf
MEMORY = (1, 256 << 20)  # one leaf of 1 GiB
QUICK = {"many": (200, 256), "large": (2, 1 << 20), "memory": (1, 4 << 20)}


def _fsync_tree(path: str) -> None:
    """fsync every file and directory under ``path``, and ``path``'s parent."""
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _peak() -> int:
    """The process's peak RSS since the last reset, in bytes (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _peak()


def _tree(workload: str, quick: bool) -> dict[str, Any]:
    import jax.numpy as jnp
    import numpy as np

    count, size = QUICK[workload] if quick else MEMORY if workload == "memory" else WORKLOADS[workload]
    # Random values, as trained weights are: Orbax compresses what it writes (zstd), and constant
    # arrays would make its files a few bytes.
    rng = np.random.default_rng(0)
    return {f"layer_{i:04d}": jnp.asarray(rng.standard_normal(size, np.float32)) for i in range(count)}


def _run_one(contender: str, workload: str, repeats: int, quick: bool, directory: str) -> dict[str, list[float]]:
    import jax

    tree = _tree(workload, quick)
    jax.block_until_ready(tree)
    target = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    if contender == "trackpoint":
        import trackpoint.jax as tpj

        def save(path: str) -> None:
            tpj.Checkpoint(state=tree).write(path)

        def restore(path: str) -> Any:
            return tpj.restore(path, {"state": target})
    else:
        import orbax.checkpoint as ocp

        checkpointer = ocp.StandardCheckpointer()

        def save(path: str) -> None:
            checkpointer.save(path, tree, force=True)
            checkpointer.wait_until_finished()
            if contender == "orbax+fsync":
                _fsync_tree(path)

        def restore(path: str) -> Any:
            return checkpointer.restore(path, target)

    if workload == "memory":  # one save, its peak memory as a multiple of the array's bytes
        nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(tree))
        path = os.path.join(directory, contender)
        before = _reset_peak()
        save(path)
        return {"peak": [(_peak() - before) / nbytes]}
    times: dict[str, list[float]] = {"save": [], "restore": []}
    for attempt in range(repeats + 1):
        path = os.path.join(directory, f"{contender}-{attempt}")
        os.sync()
        start = time.perf_counter()
        save(path)
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(restore(path))
        restored = time.perf_counter() - start
        if attempt:  # the first is a warm-up
            times["save"].append(elapsed)
            times["restore"].append(restored)
        shutil.rmtree(path, ignore_errors=True)
        for leftover in os.listdir(directory):  # trackpoint's files beside the prefix
            if leftover.startswith(f"{contender}-{attempt}"):
                os.remove(os.path.join(directory, leftover))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workloads", nargs="+", default=[*WORKLOADS, "memory"], choices=[*WORKLOADS, "memory"])
    parser.add_argument("--one", nargs=3, metavar=("CONTENDER", "WORKLOAD", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        contender, workload, directory = args.one
        print(json.dumps(_run_one(contender, workload, args.repeats, args.quick, directory)))
        return
    rounds = 1 if args.quick else args.rounds
    results: dict[tuple[str, str, str], list[float]] = {}
    for workload in args.workloads:
        for round_ in range(rounds):
            order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
            for contender in order:
                with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as directory:
                    command = [sys.executable, __file__, "--repeats", str(args.repeats), "--one"]
                    command += [contender, workload, directory] + (["--quick"] if args.quick else [])
                    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                times = json.loads(out.strip().splitlines()[-1])
                for phase, values in times.items():
                    results.setdefault((workload, phase, contender), []).extend(values)
    print(
        "| workload | phase | trackpoint (s) | orbax (s) | orbax+fsync (s) | orbax / trackpoint | orbax+fsync / trackpoint |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for workload in [w for w in WORKLOADS if w in args.workloads]:
        for phase in ("save", "restore"):
            ours, theirs, durable = (statistics.median(results[(workload, phase, c)]) for c in CONTENDERS)
            print(
                f"| {workload} | {phase} | {ours:.4g} | {theirs:.4g} | {durable:.4g} | {theirs / ours:.2f} "
                f"| {durable / ours:.2f} |"
            )
    if "memory" not in args.workloads:
        return
    print()
    print("| 1 GiB save: peak RSS rise / array bytes | trackpoint | orbax | orbax+fsync |")
    print("| --- | --- | --- | --- |")
    peaks = [statistics.median(results[("memory", "peak", c)]) for c in CONTENDERS]
    print("| median | " + " | ".join(f"{p:.3f}" for p in peaks) + " |")


if __name__ == "__main__":
    main()
