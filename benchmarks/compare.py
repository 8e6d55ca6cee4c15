"""trackpoint vs TensorFlow vs safetensors vs raw numpy file I/O, side by side in one run.

    python benchmarks/compare.py            # the full run documented in the README
    python benchmarks/compare.py --quick    # a smaller smoke run (under a minute)
    python benchmarks/compare.py --scale    # the scale workloads instead (see benchmarks/scale.py)

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
``_graph/restore_record.py``), so its "first read" is also timed: into new objects, as a job starting up;
likewise its "first save", by new objects through a new Checkpoint (no layout to reuse).

safetensors and raw have no object graph, checksums or async mode. "safetensors" reads with
``load_file`` alone; "safetensors+assign" then copies each array into the model's own, as a
restore into existing variables does. "raw" is a plain ``write``/``readinto`` of the same
bytes, the floor any format pays; "raw+fsync" adds the fsync that makes a write durable, which
every trackpoint save does (crash consistency), and which neither TensorFlow nor safetensors does.

``--scale`` runs the scale workloads (20,000 to 1,000,000 variables, 1 to 8 GiB) instead, or with
``--workload`` besides the ones named; ``benchmarks/scale.py`` describes them, the time they take
and the extra flags. ``--json PATH`` writes every result as JSON.
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
from collections.abc import Callable, Iterable
from typing import Any

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


def saved_arrays(arrays: Iterable[np.ndarray], with_adam: bool) -> list[np.ndarray]:
    """The tensors a checkpoint of these variables holds: with Adam, each variable's m and v slots too.

    The contenders without an object graph (safetensors, raw) get these same tensors, so
    that every contender writes and reads the same bytes.
    """
    arrays = list(arrays)
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

    def source(self) -> Iterable[np.ndarray]:
        """The initial values of the variables, for each new set of model objects."""
        return self.arrays

    def fresh(self) -> None:
        """New model objects and a new Checkpoint, as in a process that has just started."""
        self.model = tp.Module()
        self.model.vars = [tp.Variable(a) for a in self.source()]
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

    def __init__(self, arrays: Iterable[np.ndarray], directory: str, with_adam: bool) -> None:
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

    def __init__(self, arrays: Iterable[np.ndarray], directory: str, with_adam: bool) -> None:
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
    # The other contenders hold their variables next to the source arrays; hold as much
    # here, since the process's memory state changes how fast fresh buffers fill. (The scale
    # workloads hold no source arrays, so their raw holds no copies either.)
    hold_copies = True

    def __init__(self, arrays: Iterable[np.ndarray], directory: str, with_adam: bool) -> None:
        self.path = os.path.join(directory, f"{self.name}.bin")
        self.arrays = arrays = saved_arrays(arrays, with_adam)
        self.variables = [a.copy() for a in arrays] if self.hold_copies else []

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


def peak_extra_memory(make: Callable[[], Trackpoint]) -> tuple[int, int]:
    """Peak bytes (tracemalloc) beyond the variables during a save, then during a restore.

    ``make`` builds the contender; its variables are created while tracing, so that the
    restore's release of their old values is counted too.
    """
    gc.collect()
    tracemalloc.start()
    contender = make()
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


def time_phases(contender: Any, repeats: int, asynchronous: bool = True, first_save: bool = False) -> dict[str, Any]:
    """Samples (seconds) of each timed phase of one contender, after the same untimed warm-up for all.

    Warm-up: on this kind of virtual machine the first touch of a memory page is slow (the
    host backs it then), and a new file needs new page-cache pages. An atomic save writes a
    new file beside the old one and frees the old one's pages at the rename, so from the
    second save on it reuses pages as a training job would.
    """
    contender.write()
    contender.write()
    contender.read()
    row: dict[str, Any] = {
        "write": sample_times(contender.write, repeats),
        "read": sample_times(contender.read, repeats),
    }
    if asynchronous and hasattr(contender, "async_save"):
        row["async"] = sample_times(contender.async_save, repeats, setup=contender.finish)
        contender.finish()
    if hasattr(contender, "fresh"):
        if first_save:
            # A save by objects and a Checkpoint that have not saved yet: no layout to reuse.
            row["first save"] = sample_times(contender.write, repeats, setup=contender.fresh)
        # A restore into objects that no restore has bound yet: nothing to replay.
        row["first read"] = sample_times(contender.read, repeats, setup=contender.fresh)
    return row


def run_child(
    contender_name: str,
    workload: str,
    quick: bool,
    repeats: int,
    memory: bool,
    directory: str | None = None,
    memory_method: str = "rss",
) -> dict[str, object]:
    """Time one contender on one workload (in its own process, see main); samples, not medians.

    ``directory`` (made and removed by the parent) holds the files; without it, a temporary one.
    ``memory_method`` is for the scale workloads' memory child (the standard ones use tracemalloc).
    """
    if directory is None:
        directory = tempfile.mkdtemp(prefix=f"tp-compare-{workload}-")
        cleanup = True
    else:
        cleanup = False
    try:
        if workload not in STANDARD_WORKLOADS:
            return scale_module().run_child(contender_name, workload, repeats, memory, directory, memory_method)
        arrays = workloads(quick)[workload]
        contender = CONTENDERS[contender_name](arrays, directory, workload == "mixed")
        row = time_phases(contender, repeats, first_save=True)
        if contender_name == "trackpoint" and memory:
            del contender
            gc.collect()
            row["mem_save"], row["mem_read"] = peak_extra_memory(
                lambda: Trackpoint(arrays, directory, workload == "mixed")
            )
            saved = saved_arrays(arrays, workload == "mixed")
            row["size"] = sum(a.nbytes for a in saved)
            row["largest"] = max(a.nbytes for a in saved)
        return row
    finally:
        if cleanup:
            shutil.rmtree(directory, ignore_errors=True)


STANDARD_WORKLOADS = ("large", "many", "mixed")


def child_row(command: list[str], timeout: float | None = None) -> dict[str, Any]:
    """Run one child (``--child ...``) and return the JSON row it prints last."""
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure(
    names: list[str],
    rounds: int,
    command: Callable[[str, int], list[str]],
    timeout: Callable[[str], float] | None = None,
) -> tuple[dict[str, dict[str, list[float]]], dict[str, Any], dict[str, str]]:
    """Interleaved rounds of fresh processes: samples by contender and phase, trackpoint's other
    figures, and why a contender has no samples (only with ``timeout``: without it a failing
    child raises).

    Each round runs every contender in a fresh process (``command(contender, round_index)``),
    starting one further along the list, so that a drifting machine does not favour any of them.
    """
    samples: dict[str, dict[str, list[float]]] = {contender: {} for contender in names}
    extra: dict[str, Any] = {}
    failures: dict[str, str] = {}
    for round_index in range(rounds):
        for contender in names[round_index % len(names) :] + names[: round_index % len(names)]:
            if contender in failures:
                continue
            if timeout is None:
                row = child_row(command(contender, round_index))
            else:
                limit = timeout(contender)
                try:
                    row = child_row(command(contender, round_index), limit)
                except subprocess.TimeoutExpired:
                    failures[contender] = f"timed out after {limit:.0f} s"
                    continue
                except subprocess.CalledProcessError as error:
                    lines = (error.stderr or "").strip().splitlines() or [f"exit status {error.returncode}"]
                    failures[contender] = f"failed: {lines[-1][:200]}"
                    continue
            for key, value in row.items():
                if isinstance(value, list):
                    samples[contender].setdefault(key, []).extend(value)
                elif contender == "trackpoint":
                    extra[key] = value
    return samples, extra, failures


def medians(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    return {
        contender: {op: statistics.median(times) for op, times in ops.items()} for contender, ops in samples.items()
    }


def scale_module() -> Any:
    """benchmarks/scale.py, which imports this module by name (also when this one runs as __main__)."""
    sys.modules.setdefault("compare", sys.modules[__name__])
    import scale

    return scale


def import_time() -> float:
    import_start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import trackpoint"], check=True)
    return time.perf_counter() - import_start


def run_standard(
    args: argparse.Namespace, names: list[str], repeats: int, rounds: int, only: list[str] | None
) -> dict[str, Any]:
    """The standard workloads (``only``: those named, or all), printed as they finish; the results."""
    print(
        f"{rounds} round(s) x {repeats} repetitions per contender; medians in seconds of the {rounds * repeats} "
        "samples. Each round runs every contender in a fresh process, starting one further along the list, so "
        "that a drifting machine does not favour any of them.\n"
    )
    print(f"{'workload':<8} {'contender':<18} {'write':>8} {'read':>8} {'async':>8}")
    everything: dict[str, Any] = {}
    for name in STANDARD_WORKLOADS:
        if only is not None and name not in only:
            continue

        def command(contender: str, round_index: int, name: str = name) -> list[str]:
            command = [sys.executable, __file__, "--child", contender, name, "--repeats", str(repeats)]
            return command + (["--quick"] if args.quick else []) + (["--memory"] if round_index == 0 else [])

        samples, extra, _ = measure(names, rounds, command)
        results = medians(samples)
        everything[name] = {"samples": samples, "medians": results, "trackpoint": extra}
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
        for phase, what, op, others in (
            ("first save", "new objects, no layout to reuse", "write", ("safetensors", "raw+fsync", "tensorflow")),
            (
                "first read",
                "into new objects, nothing to replay",
                "read",
                ("safetensors", "safetensors+assign", "tensorflow"),
            ),
        ):
            ratios = " ".join(f"/{o} {op} {ours[phase] / results[o][op]:.3f}x" for o in others if o in results)
            print(f"{'':<8} trackpoint {phase} ({what}): {ours[phase]:.3f} s; {ratios}")
        print(f"{'':<8} trackpoint async/sync save: {ours['async'] / ours['write']:.1%}")
        print(
            f"{'':<8} trackpoint peak extra memory: save {extra['mem_save'] / MiB:.1f} MiB "
            f"({extra['mem_save'] / extra['size']:.1%} of {extra['size'] / MiB:.0f} MiB), restore "
            f"{extra['mem_read'] / MiB:.1f} MiB (largest tensor {extra['largest'] / MiB:.1f} MiB)\n"
        )
    return everything


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1/8 of the sizes, one round of 2 repetitions")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions per round (3; 2 with --quick)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of fresh processes, one per contender, taken in turn (3; 1 with --quick or --scale)",
    )
    parser.add_argument(
        "--workload",
        action="append",
        help="run only these workloads: large, many, mixed; with --scale, those named run besides the scale "
        "ones, and scale ones named (20000x1KiB, 16x64MiB, ...) are the only scale ones that run",
    )
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow")
    parser.add_argument("--json", metavar="PATH", help="also write every sample, median and figure to PATH as JSON")
    scale_group = parser.add_argument_group("scale workloads (see benchmarks/scale.py)")
    scale_group.add_argument(
        "--scale",
        action="store_true",
        help="run the scale workloads: 20k/200k/1M variables of 1 KiB, 1/2/4/8 GiB in 64 MiB variables "
        "(with --quick: 2k/20k, 64/128 MiB); with --rounds 1: 18 minutes with --no-tf, about 30 with TF",
    )
    scale_group.add_argument(
        "--plot",
        metavar="PATH",
        help="where --scale draws time against size (PNG, when matplotlib is installed; default docs/images/scale.png)",
    )
    scale_group.add_argument("--no-plot", action="store_true", help="draw no plot")
    scale_group.add_argument("--counts", help="variable counts instead of the defaults, comma-separated (1 KiB each)")
    scale_group.add_argument("--sizes-mib", help="total sizes in MiB instead of the defaults, comma-separated")
    scale_group.add_argument(
        "--tensor-mib", type=int, default=None, help="size of each variable of the by-size workloads (64 MiB)"
    )
    scale_group.add_argument(
        "--memory-method",
        choices=("rss", "tracemalloc"),
        default="rss",
        help="how --scale measures trackpoint's peak extra memory (rss: peak resident set growth, in a child "
        "of its own; tracemalloc: Python's allocation tracing, much slower at 1M variables)",
    )
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 3)
    rounds = args.rounds or (1 if args.quick or args.scale else 3)
    if args.child:
        contender, workload = args.child
        row = run_child(contender, workload, args.quick, repeats, args.memory, args.dir, args.memory_method)
        print(json.dumps(row))
        return 0
    names = ["trackpoint", "safetensors", "safetensors+assign", "raw", "raw+fsync"]
    names += [] if args.no_tf else ["tensorflow"]
    start = time.perf_counter()
    print(f"import trackpoint in a fresh process (incl. interpreter start): {import_time():.3f} s")
    results: dict[str, Any] = {"rounds": rounds, "repeats": repeats, "quick": args.quick, "contenders": names}
    standard = [w for w in args.workload or [] if w in STANDARD_WORKLOADS]
    if not args.scale or standard:
        results["standard"] = run_standard(args, names, repeats, rounds, standard or args.workload)
    if args.scale:
        results["scale"] = scale_module().run(args, names, repeats, rounds)
    results["seconds"] = time.perf_counter() - start
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"results written to {args.json}")
    print(f"total {results['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
