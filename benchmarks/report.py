"""``trackpoint report`` of a 1 GiB checkpoint, and the diff of two, against a sequential read of the same bytes.

    python benchmarks/report.py               # 5 rounds, page cache warm
    python benchmarks/report.py --cold        # the page cache dropped before each phase (root only)
    python benchmarks/report.py --quick       # a smoke run on 64 MiB
    python benchmarks/report.py --shape matrices  # 455 tensors of 768x768 (2.25 MiB, as BERT's), 1 GiB
    python benchmarks/report.py --shape mid   # 2,048 tensors of 512 KiB instead (1 GiB)
    python benchmarks/report.py --shape many  # 20,000 tensors of 1 KiB instead (20 MiB)

The checkpoints: 16 float32 variables of 64 MiB (random normal values), or the ``--shape``
chosen, and the same with one element of one variable changed. Contenders, in one process, interleaved round by round (the
order rotated), each phase after ``os.sync()`` and with the page cache in the same state (both
data files read once before each phase, or dropped with ``--cold``):

  read        the data file read front to back in 8 MiB pieces (``readinto``): the floor
  report      ``trackpoint report A -o page.html``'s work: every tensor read in chunks, its
              checksum verified, statistics and histogram, the tree, the HTML written
  read both   both data files read the same way
  diff        ``trackpoint report A B -o page.html``: both read, statistics of B, change per tensor

Medians in seconds and the ratio to the read of the same bytes (issue 45 asks for 1.5x at most).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import trackpoint as tp
from trackpoint.cli._report_page import render
from trackpoint.tools.report import report

# Tensors, and float32 elements in each.
SHAPES = {"large": (16, 16 << 20), "matrices": (455, 768 * 768), "mid": (2_048, 128 << 10), "many": (20_000, 256)}


def _read(*prefixes: str) -> None:
    piece = bytearray(8 << 20)
    for prefix in prefixes:
        with open(prefix + ".data-00000-of-00001", "rb", buffering=0) as f:
            while f.readinto(piece):
                pass


def _page(out: str, *prefixes: str) -> None:
    with open(out, "w", encoding="utf-8") as f:
        f.write(render(report(*prefixes)))


def _settle(cold: bool, a: str, b: str) -> None:
    os.sync()
    if cold:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    else:
        _read(a, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each phase (root only)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="large", help="tensors in the checkpoint")
    args = parser.parse_args()
    count, size = (4, 4 << 20) if args.quick else SHAPES[args.shape]
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as work:
        rng = np.random.default_rng(0)
        values = {f"layer_{i:05d}/kernel": rng.standard_normal(size, dtype=np.float32) for i in range(count)}
        a = tp.save_tensors(os.path.join(work, "a"), values)
        values["layer_00003/kernel"][123] += 1.0
        b = tp.save_tensors(os.path.join(work, "b"), values)
        del values
        out = os.path.join(work, "page.html")
        phases = [
            ("read", lambda: _read(a)),
            ("report", lambda: _page(out, a)),
            ("read both", lambda: _read(a, b)),
            ("diff", lambda: _page(out, a, b)),
        ]
        times: dict[str, list[float]] = {name: [] for name, _ in phases}
        for round_ in range(rounds):
            turn = round_ % len(phases)
            for name, run in phases[turn:] + phases[:turn]:
                _settle(args.cold, a, b)
                began = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - began)
            print(f"round {round_ + 1}", {k: [round(t, 3) for t in v] for k, v in times.items()}, flush=True)
        gib = count * size * 4 / (1 << 30)
        median = {name: statistics.median(values) for name, values in times.items()}
        cache = "cold (dropped before each phase)" if args.cold else "warm"
        print(
            f"\n{gib:.3f} GiB ({count} tensors) per checkpoint, page cache {cache}, medians of {rounds} rounds (seconds):\n"
        )
        print("| work | seconds | against the read of the same bytes |")
        print("| --- | --- | --- |")
        for name, floor in (("read", "read"), ("report", "read"), ("read both", "read both"), ("diff", "read both")):
            print(f"| {name} | {median[name]:.3f} | {median[name] / median[floor]:.2f}x |")
    print(f"\nload average at the end: {os.getloadavg()}", file=sys.stderr)  # a busy machine skews every row


if __name__ == "__main__":
    main()
