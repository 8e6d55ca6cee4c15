"""Incremental saves against full ones: what the second save of a mostly frozen model writes, and how long it takes.

    python benchmarks/incremental.py            # 18 x 64 MiB, 5 rounds
    python benchmarks/incremental.py --quick    # a smoke run

A ``tp.Checkpoint`` of 18 float32 variables of 64 MiB (random values) and a step counter is
saved once, then 2 variables are changed whole and one in a single element, and it is saved
again. Contenders:

  full         both saves plain (``CheckpointOptions()``)
  incremental  both saves ``CheckpointOptions(incremental=True)``

Measured for the second save: the saving process's ``write_bytes`` (``/proc/self/io``: bytes
this process caused to be written to storage, page-cache writeback included) and its time. Each
round runs each contender in a fresh process (interleaved, the order alternating), after
``os.sync()``; medians over rounds. The incremental save must write at most 20% of the full
save's bytes in at most 0.35x its time (issue 44).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

CONTENDERS = ("full", "incremental")


def _write_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError("no write_bytes in /proc/self/io")


def saved_then_trained(path: str, count: int, size: int, options: Any) -> tuple[Any, Callable[[], None]]:
    """The workload of both incremental benchmarks: ``count`` float32 variables of ``size`` and a
    step, saved once at ``path``; and the training step before the second save, which changes
    two variables whole, one in a single element, and the step."""
    import numpy as np

    import trackpoint as tp

    rng = np.random.default_rng(0)
    variables = {f"v{i:02d}": tp.Variable(rng.standard_normal(size, np.float32)) for i in range(count)}
    step = tp.Variable(np.int64(0))
    ckpt = tp.Checkpoint(step=step, **variables)
    ckpt.save(path, options=options)

    def train() -> None:
        variables["v00"].assign(variables["v00"].numpy() + 1)
        variables["v01"].assign(variables["v01"].numpy() * 2)
        one = variables["v02"].numpy().copy()
        one[size // 2] += 1
        variables["v02"].assign(one)
        step.assign(np.int64(1))

    return ckpt, train


def _run_one(contender: str, count: int, size: int, directory: str) -> dict[str, float]:
    import trackpoint as tp

    options = tp.CheckpointOptions(incremental=contender == "incremental")
    ckpt, train = saved_then_trained(os.path.join(directory, "ckpt"), count, size, options)
    train()
    os.sync()
    before = _write_bytes()
    start = time.perf_counter()
    ckpt.save(os.path.join(directory, "ckpt"), options=options)
    elapsed = time.perf_counter() - start
    os.sync()  # the writeback the save started but did not wait for, attributed to this process too
    return {"seconds": elapsed, "bytes": _write_bytes() - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("CONTENDER", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    count, size = (18, 1 << 20) if args.quick else (18, 16 << 20)
    if args.one:
        print(json.dumps(_run_one(args.one[0], count, size, args.one[1])))
        return
    rounds = 1 if args.quick else args.rounds
    results: dict[str, dict[str, list[float]]] = {c: {"seconds": [], "bytes": []} for c in CONTENDERS}
    for round_ in range(rounds):
        for contender in CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]:
            with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as directory:
                command = [sys.executable, __file__, "--one", contender, directory] + (
                    ["--quick"] if args.quick else []
                )
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            for name, value in json.loads(out.strip().splitlines()[-1]).items():
                results[contender][name].append(value)
    full = {name: statistics.median(values) for name, values in results["full"].items()}
    inc = {name: statistics.median(values) for name, values in results["incremental"].items()}
    print(f"{count} x {size * 4 >> 20} MiB, 2 changed and 1 in one element; the second save, medians of {rounds}:")
    print()
    print("| contender | written (MiB) | time (s) |")
    print("| --- | --- | --- |")
    for name, row in (("full", full), ("incremental", inc)):
        print(f"| {name} | {row['bytes'] / 2**20:.1f} | {row['seconds']:.3f} |")
    print(f"| incremental / full | {inc['bytes'] / full['bytes']:.3f} | {inc['seconds'] / full['seconds']:.3f} |")


if __name__ == "__main__":
    main()
