"""trackpoint vs TensorFlow vs safetensors vs raw numpy file I/O, side by side in one run.

    python benchmarks/compare.py            # the full run documented in the README
    python benchmarks/compare.py --quick    # a smaller smoke run (under a minute)

Workloads:
  large  16 float32 variables of 64 MiB (1 GiB)
  many   20,000 float32 variables of 1 KiB (20 MiB)
  mixed  300 variables of varied sizes (1 KiB - 4 MiB) after one Adam step: variables + m + v slots
         (900 tensors, 556 MiB; safetensors and raw write the same 900 arrays)

For each: median seconds to write, to read back into existing variables, and until an async
save returns, over several rounds of fresh processes (``--rounds``), after two untimed writes
and a read (see run_child); ratios of trackpoint to each other contender; and trackpoint's peak
extra memory (tracemalloc, beyond the variables) for a synchronous save and a restore.
trackpoint's reads after the first replay its bindings (an evaluation loop's case, see
``_graph/restore_record.py``), so its "first read" is also timed: into new objects, as a job starting up.

safetensors and raw have no object graph, checksums or async mode. "safetensors" reads with
``load_file`` alone; "safetensors+assign" then copies each array into the model's own, as a
restore into existing variables does. "raw" is a plain ``write``/``readinto`` of the same
bytes, the floor any format pays; "raw+fsync" adds the fsync that makes a write durable, which
every trackpoint save does (crash consistency), and which neither TensorFlow nor safetensors does.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import trackpoint as tp

MiB = 1 << 20


def workloads(quick: bool) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    scale = 8 if quick else 1
    large = [np.full((64 * MiB // 4) // scale, i, np.float32) for i in range(16)]
    many = [np.full(256, i, np.float32) for i in range(20_000 // scale)]
    sizes = np.exp(rng.uniform(np.log(256), np.log(MiB), 300 // scale)).astype(int)
    mixed = [rng.standard_normal(int(n)).astype(np.float32) for n in sizes]
    return {"large": large, "many": many, "mixed": mixed}


def saved_arrays(arrays: list[np.ndarray], with_adam: bool) -> list[np.ndarray]:
    """The tensors a checkpoint of these variables holds: with Adam, each variable's m and v slots too.

    The contenders without an object graph (safetensors, raw) get these same tensors, so
    that every contender writes and reads the same bytes.
    """
    if not with_adam:
        return arrays
    rng = np.random.default_rng(1)
    return arrays + [rng.standard_normal(a.shape).astype(a.dtype) for a in arrays for _ in range(2)]


def sample_times(fn: Callable[[], object], repeats: int, setup: Callable[[], object] | None = None) -> list[float]:
    """Seconds taken by ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        # Every repetition starts with no dirty pages left over from the one before, whose
        # write-back would otherwise land on whichever contender happens to run next.
        os.sync()
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


# -- contenders ------------------------------------------------------------------------------


class Trackpoint:
    name = "trackpoint"

    def __init__(self, arrays: list[np.ndarray], directory: str, with_adam: bool) -> None:
        self.prefix = os.path.join(directory, "tp")
        self.arrays = arrays
        self.with_adam = with_adam
        self.fresh()

    def fresh(self) -> None:
        """New model objects and a new Checkpoint, as in a process that has just started."""
        self.model = tp.Module()
        self.model.vars = [tp.Variable(a) for a in self.arrays]
        self.ckpt = tp.Checkpoint(model=self.model)
        if self.with_adam:
            self.ckpt.optimizer = tp.optimizers.Adam(0.001)
            self.ckpt.optimizer.apply_gradients([(np.ones_like(a), v) for a, v in zip(self.arrays, self.model.vars)])

    def write(self) -> None:
        self.ckpt.write(self.prefix)

    def read(self) -> None:
        self.ckpt.read(self.prefix).assert_consumed()

    def async_save(self) -> None:
        self.ckpt.write(self.prefix + "-async", tp.CheckpointOptions(enable_async=True))

    def finish(self) -> None:
        self.ckpt.sync()


class TensorFlow:
    name = "tensorflow"

    def __init__(self, arrays: list[np.ndarray], directory: str, with_adam: bool) -> None:
        import tensorflow as tf

        self.tf = tf
        self.prefix = os.path.join(directory, "tf")
        self.model = tf.Module()
        self.model.vars = [tf.Variable(a) for a in arrays]
        self.ckpt = tf.train.Checkpoint(model=self.model)
        if with_adam:
            self.ckpt.optimizer = tf.compat.v1.train.AdamOptimizer(0.001)
            self.ckpt.optimizer.apply_gradients([(tf.ones_like(v), v) for v in self.model.vars])

    def write(self) -> None:
        self.ckpt.write(self.prefix)

    def read(self) -> None:
        self.ckpt.read(self.prefix).assert_consumed()

    def async_save(self) -> None:
        self.ckpt.write(self.prefix + "-async", self.tf.train.CheckpointOptions(enable_async=True))

    def finish(self) -> None:
        self.ckpt.sync()


class Safetensors:
    name = "safetensors"

    def __init__(self, arrays: list[np.ndarray], directory: str, with_adam: bool) -> None:
        self.path = os.path.join(directory, "st.safetensors")
        self.tensors = {f"v{i}": a for i, a in enumerate(saved_arrays(arrays, with_adam))}

    def write(self) -> None:
        from safetensors.numpy import save_file

        save_file(self.tensors, self.path)

    def read(self) -> None:
        from safetensors.numpy import load_file

        load_file(self.path)


class SafetensorsAssign(Safetensors):
    """safetensors' read as a restore into a model: load the file, then copy each array into
    the model's own (what the other contenders' reads do; safetensors' ``read`` row only loads)."""

    name = "safetensors+assign"

    def __init__(self, arrays: list[np.ndarray], directory: str, with_adam: bool) -> None:
        super().__init__(arrays, directory, with_adam)
        self.destinations = {key: value.copy() for key, value in self.tensors.items()}

    def read(self) -> None:
        from safetensors.numpy import load_file

        for key, value in load_file(self.path).items():
            np.copyto(self.destinations[key], value)


class Raw:
    name = "raw"
    durable = False

    def __init__(self, arrays: list[np.ndarray], directory: str, with_adam: bool) -> None:
        self.path = os.path.join(directory, f"{self.name}.bin")
        self.arrays = arrays = saved_arrays(arrays, with_adam)
        # The other contenders hold their variables next to the source arrays; hold as much
        # here, since the process's memory state changes how fast fresh buffers fill.
        self.variables = [a.copy() for a in arrays]

    def write(self) -> None:
        with open(self.path, "wb") as f:
            f.writelines(memoryview(a).cast("B") for a in self.arrays)
            if self.durable:
                f.flush()
                os.fsync(f.fileno())

    def read(self) -> None:
        with open(self.path, "rb") as f:
            for a in self.arrays:
                f.readinto(memoryview(np.empty_like(a)).cast("B"))


class RawFsync(Raw):
    """The same plain write, made durable with fsync as every trackpoint save is."""

    name = "raw+fsync"
    durable = True


def peak_extra_memory(arrays: list[np.ndarray], directory: str, with_adam: bool) -> tuple[int, int]:
    """Peak bytes beyond the variables during a save, then during a restore.

    The variables are created while tracing, so that the restore's release of their old
    values is counted too.
    """
    gc.collect()
    tracemalloc.start()
    contender = Trackpoint(arrays, directory, with_adam)
    results = []
    for action in (contender.write, contender.read):
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        action()
        results.append(tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    return results[0], results[1]


CONTENDERS = {c.name: c for c in (Trackpoint, Safetensors, SafetensorsAssign, Raw, RawFsync, TensorFlow)}


def run_child(contender_name: str, workload: str, quick: bool, repeats: int, memory: bool) -> dict[str, object]:
    """Time one contender on one workload (in its own process, see main); samples, not medians."""
    arrays = workloads(quick)[workload]
    directory = tempfile.mkdtemp(prefix=f"tp-compare-{workload}-")
    try:
        contender = CONTENDERS[contender_name](arrays, directory, workload == "mixed")
        # Warm-up, untimed: on this kind of virtual machine the first touch of a memory page
        # is slow (the host backs it then), and a new file needs new page-cache pages. An
        # atomic save writes a new file beside the old one and frees the old one's pages at
        # the rename, so from the second save on it reuses pages as a training job would.
        contender.write()
        contender.write()
        contender.read()
        row: dict[str, object] = {
            "write": sample_times(contender.write, repeats),
            "read": sample_times(contender.read, repeats),
        }
        if hasattr(contender, "async_save"):
            row["async"] = sample_times(contender.async_save, repeats, setup=contender.finish)
            contender.finish()
        if hasattr(contender, "fresh"):
            # A restore into objects that no restore has bound yet: nothing to replay.
            row["first read"] = sample_times(contender.read, repeats, setup=contender.fresh)
        if contender_name == "trackpoint" and memory:
            del contender
            gc.collect()
            row["mem_save"], row["mem_read"] = peak_extra_memory(arrays, directory, workload == "mixed")
            saved = saved_arrays(arrays, workload == "mixed")
            row["size"] = sum(a.nbytes for a in saved)
            row["largest"] = max(a.nbytes for a in saved)
        return row
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1/8 of the sizes, one round of 2 repetitions")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions per round (3; 2 with --quick)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of fresh processes, one per contender, taken in turn (3; 1 with --quick)",
    )
    parser.add_argument("--workload", action="append", help="run only these workloads")
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow")
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 3)
    rounds = args.rounds or (1 if args.quick else 3)
    if args.child:
        print(json.dumps(run_child(args.child[0], args.child[1], args.quick, repeats, args.memory)))
        return 0
    names = ["trackpoint", "safetensors", "safetensors+assign", "raw", "raw+fsync"]
    names += [] if args.no_tf else ["tensorflow"]
    start = time.perf_counter()
    import_start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import trackpoint"], check=True)
    print(f"import trackpoint in a fresh process (incl. interpreter start): {time.perf_counter() - import_start:.3f} s")
    print(
        f"{rounds} round(s) x {repeats} repetitions per contender; medians in seconds of the {rounds * repeats} "
        "samples. Each round runs every contender in a fresh process, starting one further along the list, so "
        "that a drifting machine does not favour any of them.\n"
    )
    print(f"{'workload':<8} {'contender':<18} {'write':>8} {'read':>8} {'async':>8}")
    for name in workloads(args.quick):
        if args.workload and name not in args.workload:
            continue
        samples: dict[str, dict[str, list[float]]] = {contender: {} for contender in names}
        extra: dict[str, float] = {}
        for round_index in range(rounds):
            for contender in names[round_index % len(names) :] + names[: round_index % len(names)]:
                command = [sys.executable, __file__, "--child", contender, name, "--repeats", str(repeats)]
                command += (["--quick"] if args.quick else []) + (["--memory"] if round_index == 0 else [])
                output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                row = json.loads(output.strip().splitlines()[-1])
                for key, value in row.items():
                    if isinstance(value, list):
                        samples[contender].setdefault(key, []).extend(value)
                    elif contender == "trackpoint":
                        extra[key] = value
        results = {
            contender: {op: statistics.median(times) for op, times in ops.items()} for contender, ops in samples.items()
        }
        for contender in names:
            cells = " ".join(f"{results[contender].get(k, float('nan')):>8.3f}" for k in ("write", "read", "async"))
            print(f"{name:<8} {contender:<18} {cells}", flush=True)
        ours = results["trackpoint"]
        for other in names[1:]:
            ratios = " ".join(
                f"{op} {ours[op] / results[other][op]:.3f}x"
                for op in ("write", "read", "async")
                if op in results[other]
            )
            print(f"{'':<8} trackpoint/{other}: {ratios}")
        print(
            f"{'':<8} trackpoint first read (into new objects, nothing to replay): {ours['first read']:.3f} s; "
            + " ".join(
                f"/{other} read {ours['first read'] / results[other]['read']:.3f}x"
                for other in ("safetensors", "safetensors+assign", "tensorflow")
                if other in results
            )
        )
        print(f"{'':<8} trackpoint async/sync save: {ours['async'] / ours['write']:.1%}")
        print(
            f"{'':<8} trackpoint peak extra memory: save {extra['mem_save'] / MiB:.1f} MiB "
            f"({extra['mem_save'] / extra['size']:.1%} of {extra['size'] / MiB:.0f} MiB), restore "
            f"{extra['mem_read'] / MiB:.1f} MiB (largest tensor {extra['largest'] / MiB:.1f} MiB)\n"
        )
    print(f"total {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
