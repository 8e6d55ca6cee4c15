"""trackpoint.jax vs Orbax (``orbax.checkpoint.StandardCheckpointer``), side by side, on one pytree.

    python benchmarks/jax_compare.py            # both workloads, 3 rounds
    python benchmarks/jax_compare.py --quick    # a smoke run

Workloads (a dict pytree of float32 ``jax.Array``s on the CPU backend):
  many   2,000 leaves of 1 KiB (256 floats)
  large  8 leaves of 64 MiB: 512 MiB

Contenders:
  trackpoint  ``trackpoint.jax.Checkpoint(state=tree).write(prefix)`` (durable: fsync, rename) /
              ``trackpoint.jax.restore(prefix, target)`` into ShapeDtypeStructs
  orbax       ``StandardCheckpointer().save(path, tree, force=True)`` + ``wait_until_finished()`` /
              ``.restore(path, target)`` into the same ShapeDtypeStructs

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

CONTENDERS = ("trackpoint", "orbax")
WORKLOADS = {"many": (2000, 256), "large": (8, 16 << 20)}  # leaves, floats per leaf
QUICK = {"many": (200, 256), "large": (2, 1 << 20)}


def _tree(workload: str, quick: bool) -> dict[str, Any]:
    import jax.numpy as jnp

    count, size = (QUICK if quick else WORKLOADS)[workload]
    return {f"layer_{i:04d}": jnp.full((size,), float(i), jnp.float32) for i in range(count)}


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

        def restore(path: str) -> Any:
            return checkpointer.restore(path, target)

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
    parser.add_argument("--one", nargs=3, metavar=("CONTENDER", "WORKLOAD", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        contender, workload, directory = args.one
        print(json.dumps(_run_one(contender, workload, args.repeats, args.quick, directory)))
        return
    rounds = 1 if args.quick else args.rounds
    results: dict[tuple[str, str, str], list[float]] = {}
    for workload in WORKLOADS:
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
    print("| workload | phase | trackpoint (s) | orbax (s) | orbax / trackpoint |")
    print("| --- | --- | --- | --- | --- |")
    for workload in WORKLOADS:
        for phase in ("save", "restore"):
            ours = statistics.median(results[(workload, phase, "trackpoint")])
            theirs = statistics.median(results[(workload, phase, "orbax")])
            print(f"| {workload} | {phase} | {ours:.4g} | {theirs:.4g} | {theirs / ours:.2f} |")


if __name__ == "__main__":
    main()
