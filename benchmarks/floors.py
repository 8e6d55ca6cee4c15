"""The floors under the per-variable targets of issue 17: what CPython itself costs on this machine.

    python benchmarks/floors.py            # about a minute
    python benchmarks/floors.py --json out.json

Three measurements, each the median of 5 repetitions:

1. **Scaling.** A first restore into new objects must make, per variable, at least its key
   (a ``str``), an array over the bytes read (a numpy view) and an entry of a dict (name ->
   value, as safetensors' ``load_file`` returns too). Each is timed alone, per object, at
   20,000, 200,000 and 1,000,000 variables, each count in a fresh process (so no count
   inherits another's warm memory). The issue asks time per variable to stay within 1.2x
   from 20,000 to 1,000,000.
2. **Small values in place.** To read 20,000 small values straight into the variables'
   arrays (so that a restore's values take no new memory), a restore must first find each
   variable's array and know that nothing else holds it (``unshared_value``), check that the
   array fits the stored tensor (dtype, shape, flags) and make a byte view of it for
   ``preadv``. That work alone, before a byte is read, against the whole first restore of
   the same variables and safetensors' ``load_file`` of the same tensors.
3. **Bookkeeping memory.** What TensorFlow's semantics make a restore keep per variable
   (tracemalloc): the bindings (node id -> weak reference to the object, which
   restore-on-create and the status need), the ids of the matched nodes (for
   ``assert_consumed``) and one checkpoint key per variable. The issue asks at most 200
   bytes per variable of extra memory in all.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import weakref
from typing import Any

import numpy as np

COUNTS = (20_000, 200_000, 1_000_000)
REPEATS = 5


def _median_ns(function: Any, count: int) -> float:
    """Median nanoseconds per object of ``function()`` over REPEATS runs (what it makes is dropped)."""
    times = []
    for _ in range(REPEATS):
        gc.collect()
        start = time.perf_counter()
        made = function()
        times.append((time.perf_counter() - start) / count * 1e9)
        del made
    return statistics.median(times)


def scaling_child(count: int) -> dict[str, float]:
    """Per-object cost of a first restore's unavoidable objects, at ``count`` variables."""
    gc.disable()  # as a trackpoint restore runs (gc_pause): collections would add their own growth
    data = bytes(count * 1024)
    keys = [f"model/v/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(count)]
    arrays = [np.ndarray(256, np.float32, data, 1024 * i) for i in range(count)]
    return {
        "key str": _median_ns(lambda: [f"model/v/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(count)], count),
        "array view": _median_ns(lambda: [np.ndarray(256, np.float32, data, 1024 * i) for i in range(count)], count),
        "dict entry": _median_ns(lambda: dict(zip(keys, arrays)), count),
    }


def in_place_checks(directory: str) -> dict[str, float]:
    """Milliseconds, for 20,000 variables of 1 KiB: the checks reading in place would add, the
    first restore as it is, and safetensors' ``load_file``."""
    import trackpoint as tp
    from trackpoint._tracking.variables import unshared_value

    count = 20_000
    model = tp.Module()
    model.v = [tp.Variable(np.full(256, i, np.float32)) for i in range(count)]
    prefix = tp.Checkpoint(model=model).write(os.path.join(directory, "ckpt"))
    dtype, shape = np.dtype(np.float32), (256,)

    def checks() -> list[Any]:
        views = []
        for variable in model.v:
            out = unshared_value(variable)
            if (
                out is not None
                and out.dtype == dtype
                and out.shape == shape
                and out.base is None
                and out.flags.owndata
                and out.flags.c_contiguous
                and out.flags.aligned
            ):
                views.append(memoryview(out).cast("B"))
        return views

    def first_restore() -> None:
        fresh = tp.Module()
        fresh.v = [tp.Variable(np.zeros(256, np.float32)) for _ in range(count)]
        start = time.perf_counter()
        tp.Checkpoint(model=fresh).read(prefix).assert_consumed()
        times.append(time.perf_counter() - start)

    result = {"checks ms": _median_ns(checks, 1) / 1e6}
    times: list[float] = []
    for _ in range(REPEATS):
        first_restore()
    result["trackpoint first restore ms"] = statistics.median(times) * 1e3
    try:
        from safetensors.numpy import load_file, save_file
    except ImportError:
        return result
    path = os.path.join(directory, "model.safetensors")
    save_file({f"v{i}": np.full(256, i, np.float32) for i in range(count)}, path)
    result["safetensors load_file ms"] = _median_ns(lambda: load_file(path), 1) / 1e6
    return result


def bookkeeping_memory() -> dict[str, float]:
    """Bytes per variable of what a restore of 20,000 variables keeps by TF's semantics."""
    import trackpoint as tp

    count = 20_000
    variables = [tp.Variable(np.zeros(256, np.float32)) for _ in range(count)]

    def per_variable(build: Any) -> tuple[float, Any]:
        gc.collect()
        tracemalloc.start()
        made = build()
        current, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return current / count, made

    bindings, _ = per_variable(lambda: {i + 1: weakref.ref(v) for i, v in enumerate(variables)})
    matched, _ = per_variable(lambda: set(range(1, count + 1)))
    keys, _ = per_variable(lambda: [f"model/v/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(count)])
    return {
        "bindings B": bindings,
        "matched ids B": matched,
        "keys B": keys,
        "total B": bindings + matched + keys,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(scaling_child(args.child)))
        return 0
    scaling = {}
    for count in COUNTS:  # a fresh process each
        command = [sys.executable, __file__, "--child", str(count)]
        scaling[count] = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    print("1. Per object (ns), each count in a fresh process:\n")
    print("| object | " + " | ".join(f"{c:,}" for c in COUNTS) + " | 1M / 20k |")
    print("|---" * (len(COUNTS) + 2) + "|")
    for name in scaling[COUNTS[0]]:
        row = [scaling[c][name] for c in COUNTS]
        print(f"| {name} | " + " | ".join(f"{x:.0f}" for x in row) + f" | {row[-1] / row[0]:.2f}x |")
    with tempfile.TemporaryDirectory(prefix="tp-floors-") as directory:
        checks = in_place_checks(directory)
    print("\n2. 20,000 variables of 1 KiB (ms):\n")
    for name, value in checks.items():
        print(f"- {name}: {value:.1f}")
    memory = bookkeeping_memory()
    print("\n3. Kept per variable by a restore (bytes):\n")
    for name, value in memory.items():
        print(f"- {name}: {value:.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scaling": scaling, "in place": checks, "memory": memory}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
