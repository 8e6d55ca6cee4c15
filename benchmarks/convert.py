"""Converting and operating on a 2 GiB checkpoint against ``cp`` of the same bytes, cold and warm cache.

    python benchmarks/convert.py                 # 32 x 64 MiB float32 + 64 small tensors, 3 rounds
    python benchmarks/convert.py --quick         # 32 x 2 MiB, 1 round (a smoke run)
    python benchmarks/convert.py --json out.json

Operations, each timed in a fresh process (``--child``), rounds interleaved with the starting
operation rotated, medians reported:

  cp tf         ``cp`` of the TF checkpoint's files (the baseline of TF -> safetensors, rewrite)
  tf->st        ``tp.convert(tf checkpoint, directory)``: one ``model.safetensors``
  cp st         ``cp`` of that safetensors file (the baseline of safetensors -> TF)
  st->tf        ``tp.convert(model.safetensors, prefix)``
  rewrite       ``trackpoint.tools.rewrite.rewrite(src, dst, rename={"model": "net"})``, if present
  cp a+b        ``cp -r`` of both of average's input checkpoints: the bytes it reads (it writes half)
  average       ``trackpoint.tools.average.average([a, b], out)``, if present: its ratio is
                against ``cp a+b``; ``cp tf`` (the bytes it writes) is printed beside it

Each child runs its operation once untimed (output deleted) before the timed run, as compare.py
warms up: on this kind of virtual machine a page-cache page the guest has not used yet is slow to
touch the first time, which otherwise lands on whichever operation happens to run first.

Cache states: "warm" reads the inputs once before the timed run; "cold" runs ``os.sync()`` and
then ``posix_fadvise(POSIX_FADV_DONTNEED)`` on every input file, which drops their clean pages
from the page cache (dropping all caches needs root). Every timed run starts with ``os.sync()``
and no output left from the run before, so no contender pays for another's write-back. trackpoint
fsyncs what it writes (an atomic, durable publish); ``cp`` does not, so "cp+fsync" is printed too.

Peak extra memory: the child's peak RSS during the operation (``VmHWM``, reset just before it)
minus its RSS just before it, against the bound the issue sets: the largest tensor + 64 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

MiB = 1 << 20
OPERATIONS = ("cp tf", "tf->st", "cp st", "st->tf", "rewrite", "cp a+b", "average")
BASELINE = {"tf->st": "cp tf", "rewrite": "cp tf", "average": "cp a+b", "st->tf": "cp st"}


def _optional(module: str, name: str) -> Any:
    """The other conversion tools when they exist (``from`` imports: ``tp.convert`` is the function)."""
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError):
        return None


def build(directory: str, tensors: int, tensor_mib: int) -> dict[str, Any]:
    """The inputs: a TF checkpoint (two, for average) and its safetensors file; their sizes."""
    import trackpoint as tp

    def checkpoint(prefix: str, offset: int) -> None:
        model = tp.Module()
        model.large = [tp.Variable(np.full(tensor_mib * MiB // 4, i + offset, np.float32)) for i in range(tensors)]
        model.small = [tp.Variable(np.full(256 * (1 + i % 16), i, np.float32)) for i in range(64)]
        tp.Checkpoint(model=model).write(prefix)

    checkpoint(os.path.join(directory, "a", "ckpt"), 0)
    if _optional("trackpoint.tools.average", "average") is not None:
        checkpoint(os.path.join(directory, "b", "ckpt"), 1)
    tp.convert(os.path.join(directory, "a", "ckpt"), os.path.join(directory, "st"))
    files = _inputs(directory, "cp tf")
    return {"bytes": sum(os.path.getsize(f) for f in files), "largest": tensor_mib * MiB}


def _inputs(directory: str, operation: str) -> list[str]:
    def of(sub: str) -> list[str]:
        return sorted(os.path.join(directory, sub, n) for n in os.listdir(os.path.join(directory, sub)))

    if operation in ("cp st", "st->tf"):
        return of("st")
    return of("a") + (of("b") if operation in ("average", "cp a+b") else [])


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    """Reset this process's peak RSS (Linux: ``5`` into ``clear_refs``). A fresh process's
    ``ru_maxrss`` starts at its parent's RSS at fork, so it cannot be used as it is."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _peak() -> int:
    """Peak RSS since :func:`_reset_peak` (``VmHWM``), or ``ru_maxrss`` where that is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def child(operation: str, directory: str, cache: str) -> dict[str, Any]:
    """Run one operation once, timed, in this fresh process."""
    import trackpoint as tp

    out = os.path.join(directory, "out")
    inputs = _inputs(directory, operation)
    a = os.path.join(directory, "a", "ckpt")
    run = {
        "cp tf": lambda: subprocess.run(["cp", *inputs, out], check=True),
        "cp st": lambda: subprocess.run(["cp", *inputs, out], check=True),
        "cp a+b": lambda: subprocess.run(["cp", "-r", *(os.path.join(directory, c) for c in "ab"), out], check=True),
        "tf->st": lambda: tp.convert(a, out),
        "st->tf": lambda: tp.convert(inputs[0], os.path.join(out, "ckpt")),
        "rewrite": lambda: _optional("trackpoint.tools.rewrite", "rewrite")(
            a, os.path.join(out, "ckpt"), rename={"model": "net"}
        ),
        "average": lambda: _optional("trackpoint.tools.average", "average")(
            [a, os.path.join(directory, "b", "ckpt")], os.path.join(out, "ckpt")
        ),
    }[operation]
    # One untimed run first, its output then deleted: on this kind of virtual machine the first
    # touch of a memory page is slow (the host backs it then), so the timed run gets page-cache
    # pages the guest already holds, whichever operation ran before it (see compare.py).
    for timed in (False, True):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        if timed:
            break
        run()
    if cache == "warm":
        buffer = bytearray(MiB)  # small: this process's peak memory is measured
        for path in inputs:
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buffer):
                    pass
    os.sync()
    if cache == "cold":
        for path in inputs:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    _reset_peak()
    before = _rss()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    peak = _peak()
    row: dict[str, Any] = {"seconds": seconds, "peak_extra": max(0, peak - before)}
    if operation.startswith("cp"):  # what trackpoint pays on top: making the copy durable
        start = time.perf_counter()
        for root, _, names in os.walk(out):
            for name in names:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
        row["fsync"] = seconds + time.perf_counter() - start
        row["peak_extra"] = None  # cp's memory is another process's
    shutil.rmtree(out, ignore_errors=True)
    return row


def available(operation: str) -> bool:
    if operation == "rewrite":
        return _optional("trackpoint.tools.rewrite", "rewrite") is not None
    if operation in ("average", "cp a+b"):
        return _optional("trackpoint.tools.average", "average") is not None
    return True


def measure(
    directory: str, rounds: int, operations: list[str], caches: tuple[str, ...] = ("cold", "warm")
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {c: {o: [] for o in operations} for c in caches}
    for round_index in range(rounds):
        for cache in caches:
            shift = round_index % len(operations)
            for operation in operations[shift:] + operations[:shift]:
                command = [sys.executable, __file__, "--child", operation, "--dir", directory, "--cache", cache]
                output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                samples[cache][operation].append(json.loads(output.strip().splitlines()[-1]))
                print(
                    f"  round {round_index + 1} {cache:4} {operation:8} {samples[cache][operation][-1]['seconds']:.3f} s",
                    file=sys.stderr,
                )
    return samples


def table(samples: dict[str, dict[str, list[dict[str, Any]]]], sizes: dict[str, Any]) -> str:
    limit = sizes["largest"] + 64 * MiB
    lines = [
        (
            f"{sizes['bytes'] / MiB:.0f} MiB checkpoint, largest tensor {sizes['largest'] / MiB:.0f} MiB; medians of "
            f"{len(next(iter(next(iter(samples.values())).values())))} fresh processes; memory bound {limit / MiB:.0f} MiB"
        ),
        "",
        "| operation | cache | seconds | GiB/s | vs cp | vs cp+fsync | peak extra MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for cache, by_operation in samples.items():
        medians = {o: statistics.median(r["seconds"] for r in rows) for o, rows in by_operation.items() if rows}
        fsynced = {
            o: statistics.median(r["fsync"] for r in rows)
            for o, rows in by_operation.items()
            if rows and "fsync" in rows[0]
        }
        for operation, rows in by_operation.items():
            if not rows:
                continue
            seconds = medians[operation]
            base = BASELINE.get(operation)
            ratio = f"{seconds / medians[base]:.2f}x" if base in medians else ""
            ratio_sync = f"{seconds / fsynced[base]:.2f}x" if base in fsynced else ""
            peaks = [r["peak_extra"] for r in rows if r["peak_extra"] is not None]
            peak = f"{max(peaks) / MiB:.0f}" if peaks else "n/a"
            if operation.startswith("cp"):
                extra = f" (+fsync {fsynced[operation]:.3f})"
            else:
                extra = ""
            read = sizes["bytes"] * (2 if operation in ("average", "cp a+b") else 1)
            if operation == "average" and "cp tf" in medians:
                ratio += f" ({seconds / medians['cp tf']:.2f}x cp tf)"
                ratio_sync += f" ({seconds / fsynced['cp tf']:.2f}x)"
            lines.append(
                f"| {operation}{extra} | {cache} | {seconds:.3f} | {read / seconds / (1 << 30):.2f} | {ratio} | {ratio_sync} | {peak} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per operation and cache state")
    parser.add_argument("--tensors", type=int, default=32, help="number of large tensors (default: 32)")
    parser.add_argument("--tensor-mib", type=int, default=64, help="MiB per large tensor (default: 64)")
    parser.add_argument("--quick", action="store_true", help="32 x 2 MiB, 1 round")
    parser.add_argument("--dir", help="working directory (default: a new one under the system temporary directory)")
    parser.add_argument("--json", metavar="PATH", help="also write every sample as JSON")
    parser.add_argument(
        "--caches", default="cold,warm", choices=["cold,warm", "cold", "warm"], help="cache states to time (both)"
    )
    parser.add_argument("--child", choices=OPERATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--cache", choices=["cold", "warm"], default="warm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.dir, args.cache)))
        return 0
    if args.quick:
        args.tensor_mib, args.rounds = 2, 1
    directory = args.dir or tempfile.mkdtemp(prefix="tp-bench-convert-")
    os.makedirs(directory, exist_ok=True)
    try:
        sizes = build(directory, args.tensors, args.tensor_mib)
        operations = [o for o in OPERATIONS if available(o)]
        skipped = [o for o in OPERATIONS if o not in operations]
        samples = measure(directory, args.rounds, operations, tuple(args.caches.split(",")))
        print(table(samples, sizes))
        if skipped:
            print(f"\nnot measured (not in this tree): {', '.join(skipped)}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"sizes": sizes, "samples": samples}, f, indent=1)
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
