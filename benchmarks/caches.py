"""Whether the two reuse caches still pay: each save and restore with its cache and without.

    python benchmarks/caches.py                 # every workload
    python benchmarks/caches.py --workload nested

The save layout (``_graph/save_layout.py``) and the restore record
(``_graph/restore_record.py``) stay only while they save at least 20% of a repeated save or
restore on a realistic workload (issue 16); PERFORMANCE.md keeps the latest table.

Workloads:
  many    20,000 float32 variables of 1 KiB in one list
  nested  48 blocks x 8 layers (64x64 kernel, bias), after one Adam step: 768 variables + 1,536 slots
  mixed   300 variables of 1 KiB - 4 MiB after one Adam step (556 MiB)

Each repetition times the cached and the uncached call back to back, alternating which goes
first, after ``os.sync()`` and a collection; "uncached" drops the checkpoint's cache just before
the call, so the call walks as a first save or restore does, in a warm process.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

import trackpoint as tp


def _many() -> tp.Checkpoint:
    model = tp.Module()
    model.vars = [tp.Variable(np.full(256, i, np.float32)) for i in range(20_000)]
    return tp.Checkpoint(model=model)


def _with_adam(model: tp.Module, variables: list[tp.Variable]) -> tp.Checkpoint:
    ckpt = tp.Checkpoint(model=model, optimizer=tp.optimizers.Adam(0.001))
    ckpt.optimizer.apply_gradients([(np.ones(v.shape, np.float32), v) for v in variables])
    return ckpt


def _nested() -> tp.Checkpoint:
    rng = np.random.default_rng(0)
    root = tp.Module()
    root.blocks = []
    variables = []
    for _ in range(48):
        block = tp.Module()
        for index in range(8):
            layer = tp.Module()
            layer.kernel = tp.Variable(rng.standard_normal((64, 64)).astype(np.float32))
            layer.bias = tp.Variable(np.zeros(64, np.float32))
            setattr(block, f"layer{index}", layer)
            variables += [layer.kernel, layer.bias]
        root.blocks.append(block)
    return _with_adam(root, variables)


def _mixed() -> tp.Checkpoint:
    rng = np.random.default_rng(0)
    sizes = np.exp(rng.uniform(np.log(256), np.log(1 << 20), 300)).astype(int)
    model = tp.Module()
    model.vars = [tp.Variable(rng.standard_normal(int(n)).astype(np.float32)) for n in sizes]
    return _with_adam(model, list(model.vars))


WORKLOADS: dict[str, Callable[[], tp.Checkpoint]] = {"many": _many, "nested": _nested, "mixed": _mixed}


def _timed(call: Callable[[], object]) -> float:
    os.sync()
    gc.collect()
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(name: str, repeats: int) -> dict[str, float]:
    """Median seconds of a repeated save and restore of ``name``, with and without each cache."""
    ckpt = WORKLOADS[name]()
    directory = tempfile.mkdtemp(prefix="tp-caches-")
    prefix = os.path.join(directory, "c")
    try:
        ckpt.write(prefix)
        ckpt.read(prefix).assert_consumed()
        times: dict[str, list[float]] = {"save": [], "save uncached": [], "restore": [], "restore uncached": []}
        for repeat in range(repeats):
            order = (False, True) if repeat % 2 else (True, False)
            for cached in order:
                if not cached:
                    ckpt._tp_saving.layout = None
                times["save" if cached else "save uncached"].append(_timed(lambda: ckpt.write(prefix)))
            for cached in order:
                ckpt.read(prefix).assert_consumed()  # a record to reuse (or not)
                if not cached:
                    object.__setattr__(ckpt, "_tp_restore_record", None)
                times["restore" if cached else "restore uncached"].append(
                    _timed(lambda: ckpt.read(prefix).assert_consumed())
                )
        return {key: statistics.median(values) for key, values in times.items()}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    print(
        f"{'workload':8s} {'save':>9s} {'uncached':>9s} {'saves':>6s}  {'restore':>9s} {'uncached':>9s} {'saves':>6s}"
    )
    for name in args.workload or list(WORKLOADS):
        t = measure(name, args.repeats)
        print(
            f"{name:8s} {t['save'] * 1e3:7.1f}ms {t['save uncached'] * 1e3:7.1f}ms "
            f"{1 - t['save'] / t['save uncached']:6.0%}  {t['restore'] * 1e3:7.1f}ms "
            f"{t['restore uncached'] * 1e3:7.1f}ms {1 - t['restore'] / t['restore uncached']:6.0%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
