"""How much a checkpoint being written slows a single-threaded training loop, and how long save() blocks.

    python benchmarks/async_interference.py            # 3 fresh processes of 12 s per mode and loop
    python benchmarks/async_interference.py --quick    # a smoke run

Loops (one core, where Python overhead dominates, as issue 44 asks):
  torch  an MLP of 20 Linear(64, 64) layers with ReLU, batch 32, SGD; ``torch.set_num_threads(1)``
  numpy  20 float32 64 x 64 matmuls with a tanh each, the same arithmetic by hand in NumPy

The state saved, apart from the loop's own: 20,000 float32 variables of 1 KiB and 4 of 64 MiB.

Modes, each in fresh processes (modes interleaved, the order rotating by round):
  async          back to back ``tp.Checkpoint.save`` with ``enable_async=True``: a new one as soon
                 as the previous is written (a write callback says so), called from the loop
  async-process  the same with ``async_writer="process"``: a child process writes
  async-paced    ``async-process`` saves, each started at least ``--pace`` seconds (1) after the
                 last began: a save a second instead of as often as the writer allows
  torch.save     ``torch.save`` of the same state (as tensors) back to back in a thread
  sync           a synchronous ``tp.Checkpoint.save`` from the loop every 10 steps

Within each process the loop runs in windows of ``--window`` seconds that alternate between no
save and saves as the mode makes them; a window with saves goes on until its last save is
written, so that it holds whole saves. The share of a window with saves is its steps per second over
the mean of the two windows without saves around it. This VM's speed drifts by 10-20% from one
second to the next (other guests on the host), so fresh processes compared with each other
measured that drift as much as the saves; neighbouring windows share it.

Reported: steps per second without and with saves, the median share, saves per second and the
loop's time lost per save; for the async modes, the median time ``save()`` blocked against the
time of one copy of the state (``np.copyto`` into preallocated arrays). Medians over windows of
all rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

MODES = ("async", "async-process", "async-paced", "torch.save", "sync")
SAVE_TIMEOUT = 120.0  # seconds a window with saves waits for its last save after its end
LOOPS = ("torch", "numpy")


def _state(quick: bool) -> dict[str, np.ndarray]:
    many, large = (2_000, 4 << 20) if quick else (20_000, 16 << 20)
    rng = np.random.default_rng(0)
    state = {f"small_{i:05d}": rng.standard_normal(256, np.float32) for i in range(many)}
    state.update({f"large_{i}": rng.standard_normal(large, np.float32) for i in range(4)})
    return state


def _torch_loop() -> Any:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(20):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 64)

    def step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def _numpy_loop() -> Any:
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((64, 64), np.float32) * 0.1 for _ in range(20)]
    x = rng.standard_normal((32, 64), np.float32)

    def step() -> None:
        h = x
        for w in weights:
            h = np.tanh(h @ w)
        for w in weights:  # a made-up update, as much work again
            w -= 1e-6 * (h.T @ h)

    return step


def _run_one(
    loop: str,
    mode: str,
    seconds: float,
    window: float,
    quick: bool,
    directory: str,
    loop_cpu: int | None,
    pace_seconds: float,
) -> dict[str, Any]:
    import trackpoint as tp

    if loop_cpu is not None:  # the loop's thread only: the writers keep to the other CPUs by themselves
        os.sched_setaffinity(0, {loop_cpu})
    step = _torch_loop() if loop == "torch" else _numpy_loop()
    state = _state(quick)
    variables = {name: tp.Variable(value) for name, value in state.items()}
    holder = tp.Module()
    holder.vars = list(variables.values())
    ckpt = tp.Checkpoint(state=holder)
    for _ in range(50):  # warm up the loop
        step()
    written = threading.Event()
    writer = "process" if mode in ("async-process", "async-paced") else None
    pace = pace_seconds if mode == "async-paced" else 0.0
    last_began = [-pace]
    options = tp.CheckpointOptions(enable_async=True, experimental_write_callbacks=[written.set], async_writer=writer)
    path = os.path.join(directory, "ckpt")
    blocked: list[float] = []
    saving, idle, stop = threading.Event(), threading.Event(), threading.Event()
    idle.set()
    saved = [0]  # by torch.save
    failures: list[BaseException] = []  # of torch.save, raised by the loop
    saver = None
    if mode == "torch.save":
        import torch

        tensors = {name: torch.from_numpy(value) for name, value in state.items()}

        def save_while_asked() -> None:
            n = 0
            while not stop.is_set():
                if not saving.wait(0.01):
                    continue
                idle.clear()
                if not saving.is_set():  # the window ended meanwhile: no save runs into the next
                    idle.set()
                    continue
                try:
                    torch.save(tensors, os.path.join(directory, f"t{n % 2}.pt"))
                except Exception as exc:  # noqa: BLE001 - raised by the loop, which waits for this save
                    failures.append(exc)
                n += 1
                saved[0] += 1
                idle.set()

        saver = threading.Thread(target=save_while_asked, daemon=True)
        saver.start()
    elif mode.startswith("async"):
        ckpt.write(path, options)  # the first save starts the writer (thread or process)
        ckpt.sync()

    def run(with_saves: bool) -> tuple[float, int]:
        """Steps per second over one window, and the saves started in it. A window with saves
        lasts until its last save is written: it holds whole saves, each one's burst of Python
        work at its start and its writing after."""
        saves, steps, saved[0] = 0, 0, 0
        last_began[0] = -pace
        written.set()
        if with_saves and saver is not None:
            saving.set()
        start = time.perf_counter()
        while True:
            step()
            steps += 1
            now = time.perf_counter() - start
            if now >= window:
                saving.clear()
                if written.is_set() and idle.is_set():
                    break
                if failures:
                    raise failures[0]
                if now >= window + SAVE_TIMEOUT:  # a failed async save calls no callback: sync() raises it
                    ckpt.sync()
                    raise TimeoutError(f"a save started in this window is not written after {SAVE_TIMEOUT} s")
                continue
            if not with_saves:
                continue
            if mode.startswith("async") and written.is_set() and now - last_began[0] >= pace:
                last_began[0] = now
                written.clear()
                began = time.perf_counter()
                ckpt.write(path, options)
                blocked.append(time.perf_counter() - began)
                saves += 1
            elif mode == "sync" and steps % 10 == 0:
                ckpt.write(path)
                saves += 1
        elapsed = time.perf_counter() - start
        idle.wait()
        ckpt.sync()
        return steps / elapsed, saves + saved[0]

    os.sync()
    quiet: list[float] = []
    busy: list[float] = []
    shares: list[float] = []
    busy_seconds: list[float] = []
    saves = 0
    before = run(False)[0]
    began_all = time.perf_counter()
    while time.perf_counter() - began_all + 2 * window <= seconds or not busy:
        began = time.perf_counter()
        rate, started = run(True)
        busy_seconds.append(time.perf_counter() - began)
        after = run(False)[0]
        quiet.append(before)
        busy.append(rate)
        shares.append(rate / ((before + after) / 2))
        saves += started
        before = after
    stop.set()
    if saver is not None:
        saver.join()
    copies = [np.empty_like(v) for v in state.values()]
    began = time.perf_counter()
    for target, value in zip(copies, state.values()):
        np.copyto(target, value)
    copy = time.perf_counter() - began
    return {
        "quiet": quiet,
        "busy": busy,
        "shares": shares,
        "saves_per_s": saves / sum(busy_seconds),
        "blocked": blocked,
        "copy": copy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=12.0, help="per process: windows with and without saves")
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--modes", default=",".join(MODES), help="a comma-separated subset of the modes")
    parser.add_argument(
        "--loop-cpu", type=int, help="pin the loop's thread to this CPU (this VM takes the disk's interrupts on one)"
    )
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between the starts of async-paced saves")
    parser.add_argument("--one", nargs=3, metavar=("LOOP", "MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds, window = (1.0, 0.5) if args.quick else (args.seconds, args.window)
    if args.one:
        loop, mode, directory = args.one
        print(json.dumps(_run_one(loop, mode, seconds, window, args.quick, directory, args.loop_cpu, args.pace)))
        return
    rounds = 1 if args.quick else args.rounds
    modes = tuple(m for m in MODES if m in args.modes.split(","))
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(rounds):
        for loop in LOOPS:
            order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
            for mode in order:
                with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as directory:
                    command = [sys.executable, __file__, "--seconds", str(seconds), "--window", str(window)]
                    command += ["--one", loop, mode, directory] + (["--quick"] if args.quick else [])
                    command += [] if args.loop_cpu is None else ["--loop-cpu", str(args.loop_cpu)]
                    command += ["--pace", str(args.pace)]
                    timeout = seconds * 4 + 600  # the windows, the waits for their last saves, the setup
                    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=timeout).stdout
                results.setdefault((loop, mode), []).append(json.loads(out.strip().splitlines()[-1]))

    def pooled(loop: str, mode: str, field: str) -> list[float]:
        return [value for r in results[(loop, mode)] for value in r[field]]

    # Back to back, a faster writer saves more often: the loop's loss per save tells writers apart.
    print(
        "| loop | mode | steps/s without saves | steps/s with saves | share | saves/s | loop time lost per save (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for loop in LOOPS:
        for mode in modes:
            share = statistics.median(pooled(loop, mode, "shares"))
            quiet, busy = statistics.median(pooled(loop, mode, "quiet")), statistics.median(pooled(loop, mode, "busy"))
            rate = statistics.median(r["saves_per_s"] for r in results[(loop, mode)])
            lost = f"{(1 - share) / rate:.3f}" if rate else ""
            print(f"| {loop} | {mode} | {quiet:.1f} | {busy:.1f} | {share:.3f} | {rate:.2f} | {lost} |")
    print()
    copy = statistics.median(r["copy"] for loop in LOOPS for mode in modes for r in results[(loop, mode)])
    print("| mode | async save() blocked (s) | one copy of the state (s) | bound: 1.5 x copy + 5 ms |")
    print("| --- | --- | --- | --- |")
    for mode in (m for m in modes if m.startswith("async")):
        blocked = [b for loop in LOOPS for b in pooled(loop, mode, "blocked")]
        print(f"| {mode} | {statistics.median(blocked):.4f} | {copy:.4f} | {1.5 * copy + 0.005:.4f} |")


if __name__ == "__main__":
    main()
