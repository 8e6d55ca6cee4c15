"""How long ``save()`` blocks the caller: async vs sync, on the same state.

    python benchmarks/async_save.py [--repeats N] [--quick]

Workloads: "large" is 16 float32 variables of 64 MiB (1 GiB); "many" is 20,000 float32
variables of 1 KiB. For each: the median time until a synchronous save returns, the median
time until an async save returns, and the async share of the sync time. Variables are
reassigned between saves so every save writes fresh state.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

import numpy as np

import trackpoint as tp


def _workloads(quick: bool) -> dict[str, list[tp.Variable]]:
    scale = 16 if quick else 1
    return {
        "large": [tp.Variable(np.full((64 << 20) // 4 // scale, i, np.float32)) for i in range(16)],
        "many": [tp.Variable(np.full(256, i, np.float32)) for i in range(20_000 // scale)],
    }


def _measure(variables: list[tp.Variable], enable_async: bool, repeats: int, directory: str) -> float:
    holder = tp.Module()
    holder.vars = variables
    ckpt = tp.Checkpoint(model=holder)
    options = tp.CheckpointOptions(enable_async=enable_async)
    times = []
    for _ in range(repeats):
        for v in variables[:4]:
            v.assign_add(np.ones(v.shape, v.dtype))
        start = time.perf_counter()
        ckpt.save(f"{directory}/ckpt", options=options)
        times.append(time.perf_counter() - start)
        ckpt.sync()  # not counted: the background write itself
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1/16 of the sizes, for a smoke run")
    args = parser.parse_args()
    print(f"{'workload':<8} {'sync save (s)':>14} {'async returns (s)':>18} {'async / sync':>13}")
    for name, variables in _workloads(args.quick).items():
        directory = tempfile.mkdtemp(prefix="tp-bench-")
        try:
            sync = _measure(variables, False, args.repeats, directory)
            asynchronous = _measure(variables, True, args.repeats, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        print(f"{name:<8} {sync:>14.4f} {asynchronous:>18.4f} {asynchronous / sync:>12.1%}")


if __name__ == "__main__":
    main()
