"""What work on the other CPU costs a single-threaded training loop, whoever does it.

    python benchmarks/vcpu_neighbours.py             # 14 window pairs per case
    python benchmarks/vcpu_neighbours.py --quick     # a smoke run (--kinds to choose neighbours)

The loop (``async_interference``'s torch MLP) is pinned to one CPU; a neighbour process pinned
to another does one of:
  spin       a Python busy loop
  memcpy     copies a 64 MiB array into another, over and over
  dd-direct  ``dd bs=8M oflag=direct`` writes of 256 MiB to a file beside this script's temp dir
  dd-cached  the same through the page cache, each file fsynced
  save-like  files as back-to-back saves of ``async_interference`` write them: 256 MiB by
             ``dd bs=16M oflag=direct conv=fsync`` into a new file, renamed over the last,
             then 0.25 s asleep (about 600 MB/s, the rate of those saves here)

The neighbour is stopped (SIGSTOP) and continued (SIGCONT) in alternate windows; the share of a
window with the neighbour running is its steps per second over the mean of the two windows
without it around it (as ``async_interference`` measures). Each case runs with the loop on each
of the first two CPUs this process may use, because the disk's interrupts are delivered to one CPU
(``/proc/interrupts``), whose loop they interrupt. Needs Linux, two CPUs and ``dd``.

What it shows on this VM (PERFORMANCE.md, "Saves beside a training loop"): a writer process
that moves a state's bytes through memory and to the disk costs the loop some of its speed
through the memory bus and the disk's interrupts, not only through the GIL.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import async_interference

KINDS = ("spin", "memcpy", "dd-direct", "dd-cached", "save-like")


def _neighbour(kind: str, cpu: int, directory: str) -> list[str]:
    target = os.path.join(directory, "neighbour")
    script = {
        "spin": [sys.executable, "-c", "while True: pass"],
        "memcpy": [
            sys.executable,
            "-c",
            "import numpy as np\na = np.ones(64 << 20, np.uint8); b = np.empty_like(a)\nwhile True: np.copyto(b, a)",
        ],
        "dd-direct": [
            "sh",
            "-c",
            f"while true; do dd if=/dev/zero of={target} bs=8M count=32 oflag=direct 2>/dev/null; done",
        ],
        "dd-cached": [
            "sh",
            "-c",
            f"while true; do dd if=/dev/zero of={target} bs=8M count=32 conv=fsync 2>/dev/null; done",
        ],
        "save-like": [
            "sh",
            "-c",
            (
                f"while true; do dd if=/dev/zero of={target}.tmp bs=16M count=16 oflag=direct conv=fsync 2>/dev/null; "
                f"mv {target}.tmp {target}; sleep 0.25; done"
            ),
        ],
    }[kind]
    return ["taskset", "-c", str(cpu), *script]


def _share(kind: str, loop_cpu: int, other: int, pairs: int, window: float, directory: str) -> float:
    os.sched_setaffinity(0, {loop_cpu})
    step = async_interference._torch_loop()
    for _ in range(100):
        step()

    def run() -> float:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < window:
            step()
            steps += 1
        return steps / (time.perf_counter() - start)

    neighbour = subprocess.Popen(_neighbour(kind, other, directory), start_new_session=True)
    try:
        time.sleep(0.5)
        os.killpg(neighbour.pid, signal.SIGSTOP)
        shares, before = [], run()
        for _ in range(pairs):
            os.killpg(neighbour.pid, signal.SIGCONT)
            busy = run()
            os.killpg(neighbour.pid, signal.SIGSTOP)
            after = run()
            shares.append(busy / ((before + after) / 2))
            before = after
    finally:
        os.killpg(neighbour.pid, signal.SIGKILL)
        neighbour.wait()
    return statistics.median(shares)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=14)
    parser.add_argument("--window", type=float, default=0.7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--kinds", default=",".join(KINDS), help="a comma-separated subset of the neighbours")
    args = parser.parse_args()
    pairs, window = (2, 0.2) if args.quick else (args.pairs, args.window)
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs two CPUs")
    first, second = sorted(os.sched_getaffinity(0))[:2]
    print(f"| neighbour on the other CPU | loop on CPU {first}: share | loop on CPU {second}: share |")
    print("| --- | --- | --- |")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as directory:
        for kind in (k for k in KINDS if k in args.kinds.split(",")):
            shares = [_share(kind, a, b, pairs, window, directory) for a, b in ((first, second), (second, first))]
            print(f"| {kind} | {shares[0]:.3f} | {shares[1]:.3f} |")


if __name__ == "__main__":
    main()
