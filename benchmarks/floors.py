"""The floors under the per-variable targets of issue 17: what CPython itself costs on this machine.

    python benchmarks/floors.py            # about a minute
    python benchmarks/floors.py --json out.json

Four measurements, each a median (of 5 repetitions; of 9 rounds for the fourth):

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
   restore-on-create and the status need), the matched nodes (for ``assert_consumed``: one
   flag a node) and one checkpoint key per variable; and the floor under any such
   bookkeeping, whatever its containers: the object graph's bytes per variable (read whole
   before the walk), each key's bytes, and one weak reference. The issue asks at most 200
   bytes per variable of extra memory in all.
4. **A minimal first restore.** The steps a first restore by name of a TF checkpoint cannot
   skip, written out by hand for this one model (a list of 20,000 variables) with none of
   trackpoint's generality: parse the index and the object graph, find each checkpoint
   child's live variable by name and keep a weak reference to it, take each key from its
   node, look the entries up, read the data file in one ``pread``, and per tensor verify its
   crc32c, make an array over the bytes read, check dtype and shape and assign. Timed
   interleaved with trackpoint's first restore (``read`` and ``assert_consumed``, the latter's
   share given too) and safetensors' ``load_file`` in one process, each round on new variables, the collector
   paused for every contender as trackpoint pauses it. The issue asks a first restore to
   cost no more than ``load_file``.
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
    """Bytes per variable of what a restore of 20,000 variables keeps by TF's semantics, and the floor under it."""
    import trackpoint as tp
    from trackpoint._format.bundle_reader import BundleReader
    from trackpoint._graph.restore import read_object_graph_bytes

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
    matched, _ = per_variable(lambda: np.zeros(count + 1, bool))
    keys, _ = per_variable(lambda: [f"model/v/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(count)])
    model = tp.Module()
    model.v = variables
    with tempfile.TemporaryDirectory(prefix="tp-floors-") as directory:
        prefix = tp.Checkpoint(model=model).write(os.path.join(directory, "ckpt"))
        reader = BundleReader(prefix)
        graph = read_object_graph_bytes(reader) or b""
        key_bytes = sum(len(key) for key in reader.raw_keys() if not key.startswith(b"_CHECKPOINTABLE_OBJECT_GRAPH"))
        reader.close()
    return {
        "bindings B": bindings,
        "matched flags B": matched,
        "keys B": keys,
        "total B": bindings + matched + keys,
        "floor: object graph bytes B": len(graph) / count,
        "floor: key bytes B": key_bytes / count,
        "floor: one weak reference B": sys.getsizeof(weakref.ref(variables[0])),
    }


def minimal_first_restore(directory: str, rounds: int = 9) -> dict[str, float]:
    """Median milliseconds of measurement 4 (see the module docstring)."""
    import trackpoint as tp
    from trackpoint._format.bundle_reader import BundleReader
    from trackpoint._format.crc import crc32c, unmask_all
    from trackpoint._graph.node_bytes import split_nodes, variable_key
    from trackpoint._graph.object_graph import parse_graph
    from trackpoint._graph.restore import read_object_graph_bytes

    count = 20_000
    source = [np.full(256, i, np.float32) for i in range(count)]

    def model() -> tp.Checkpoint:
        fresh = tp.Module()
        fresh.v = [tp.Variable(np.zeros(256, np.float32)) for _ in range(count)]
        return tp.Checkpoint(model=fresh)

    saved = tp.Module()
    saved.v = [tp.Variable(a) for a in source]
    prefix = tp.Checkpoint(model=saved).write(os.path.join(directory, "ckpt"))

    def minimal(ckpt: tp.Checkpoint) -> None:
        reader = BundleReader(prefix)
        raw = read_object_graph_bytes(reader) or b""
        nodes = parse_graph(raw, prefix, validate=False).nodes
        node_bytes = split_nodes(raw, len(nodes)) or []

        def child(node_id: int, name: str) -> int:
            return next(c.node_id for c in nodes[node_id].children if c.local_name == name)

        list_id = child(child(0, "model"), "v")
        live = ckpt.model.v._tp["children"]
        bound, found, keys = {}, [], []
        for c in nodes[list_id].children:
            variable = live[c.local_name]
            bound[c.node_id] = weakref.ref(variable)
            found.append(variable)
            keys.append(variable_key(node_bytes[c.node_id]))
        columns = reader.columns(keys)
        fd = reader.shard_fd(0, keys[0])[0]
        data = os.pread(fd, int((columns.offset + columns.size).max()), 0)
        view = memoryview(data)
        values = []
        for variable, start, size, crc in zip(
            found, columns.offset.tolist(), columns.size.tolist(), unmask_all(columns.crc32c).tolist()
        ):
            if crc32c(view[start : start + size]) != crc:
                raise RuntimeError("checksum")
            value = np.ndarray((256,), np.float32, data, start)
            current = variable._value
            if value.dtype != current.dtype or value.shape != current.shape:
                raise RuntimeError("dtype or shape")
            values.append(value)
        for variable, value in zip(found, values):
            variable._value = value
        reader.close()

    try:
        from safetensors.numpy import load_file, save_file
    except ImportError:
        load_file = None
    else:
        path = os.path.join(directory, "model.safetensors")
        save_file({f"v{i}": a for i, a in enumerate(source)}, path)

    def trackpoint(ckpt: tp.Checkpoint) -> None:
        status = ckpt.read(prefix)
        read = time.perf_counter()
        status.assert_consumed()
        asserted.append(time.perf_counter() - read)

    contenders: dict[str, Any] = {"minimal first restore ms": minimal, "trackpoint first restore ms": trackpoint}
    if load_file is not None:
        contenders["safetensors load_file ms"] = lambda ckpt: load_file(path)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    asserted: list[float] = []  # of each trackpoint restore, the assert_consumed part
    for _ in range(rounds):
        for name, run in contenders.items():
            ckpt = model()
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                run(ckpt)
                times[name].append(time.perf_counter() - start)
            finally:
                gc.enable()
    result = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    result["of which assert_consumed ms"] = statistics.median(asserted) * 1e3
    if load_file is not None:
        for name in ("minimal first restore", "trackpoint first restore"):
            result[f"{name} / load_file"] = result[f"{name} ms"] / result["safetensors load_file ms"]
    return result


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
    with tempfile.TemporaryDirectory(prefix="tp-floors-") as directory:
        minimal = minimal_first_restore(directory)
    print("\n4. A first restore of 20,000 variables of 1 KiB, interleaved, medians (ms, or ratio):\n")
    for name, value in minimal.items():
        print(f"- {name}: {value:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scaling": scaling, "in place": checks, "memory": memory, "minimal": minimal}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
