"""How much a checkpoint being written slows a single-threaded training loop, and how long save() blocks.

    python benchmarks/async_interference.py            # 3 rounds of 8 s per mode and loop
    python benchmarks/async_interference.py --quick    # a smoke run

Loops (one core, where Python overhead dominates, as issue 44 asks):
  torch  an MLP of 20 Linear(64, 64) layers with ReLU, batch 32, SGD; ``torch.set_num_threads(1)``
  numpy  20 float32 64 x 64 matmuls with a tanh each, the same arithmetic by hand in NumPy

The state saved, apart from the loop's own: 20,000 float32 variables of 1 KiB and 4 of 64 MiB.

Modes, each for ``--seconds`` in a fresh process (modes interleaved, the order rotating by round):
  none        the loop alone
  async       back to back ``tp.Checkpoint.save`` with ``enable_async=True``: a new one as soon as
              the previous is written (a write callback says so), called from the loop
  async-process  the same with ``async_writer="process"``: a child process writes
  torch.save  ``torch.save`` of the same state (as tensors) back to back in a thread
  sync        back to back synchronous ``tp.Checkpoint.save`` from the loop

Reported: steps per second of each loop per mode, as a share of ``none``; for ``async``, the
median time ``save()`` blocked against the time of one copy of the state (``np.copyto`` into
preallocated arrays). Medians over rounds.
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

MODES = ("none", "async", "async-process", "torch.save", "sync")
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


def _run_one(loop: str, mode: str, seconds: float, quick: bool, directory: str) -> dict[str, Any]:
    import trackpoint as tp

    step = _torch_loop() if loop == "torch" else _numpy_loop()
    state = _state(quick)
    variables = {name: tp.Variable(value) for name, value in state.items()}
    holder = tp.Module()
    holder.vars = list(variables.values())
    ckpt = tp.Checkpoint(state=holder)
    for _ in range(50):  # warm up the loop
        step()
    written = threading.Event()
    written.set()
    writer = "process" if mode == "async-process" else None
    options = tp.CheckpointOptions(enable_async=True, experimental_write_callbacks=[written.set], async_writer=writer)
    blocked: list[float] = []
    stop = threading.Event()
    saver = None
    if mode == "torch.save":
        import torch

        tensors = {name: torch.from_numpy(value) for name, value in state.items()}

        def save_forever() -> None:
            n = 0
            while not stop.is_set():
                torch.save(tensors, os.path.join(directory, f"t{n % 2}.pt"))
                n += 1

        saver = threading.Thread(target=save_forever, daemon=True)
    path = os.path.join(directory, "ckpt")
    os.sync()
    if saver is not None:
        saver.start()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
        if mode.startswith("async") and written.is_set():
            written.clear()
            began = time.perf_counter()
            ckpt.write(path, options)
            blocked.append(time.perf_counter() - began)
        elif mode == "sync" and steps % 10 == 0:
            ckpt.write(path)
    elapsed = time.perf_counter() - start
    stop.set()
    if saver is not None:
        saver.join()
    ckpt.sync()
    copies = [np.empty_like(v) for v in state.values()]
    began = time.perf_counter()
    for target, value in zip(copies, state.values()):
        np.copyto(target, value)
    copy = time.perf_counter() - began
    return {
        "steps_per_s": steps / elapsed,
        "saves_per_s": len(blocked) / elapsed,
        "blocked": statistics.median(blocked) if blocked else None,
        "copy": copy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--modes", default=",".join(MODES), help="a comma-separated subset of the modes (none always runs)"
    )
    parser.add_argument("--one", nargs=3, metavar=("LOOP", "MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    if args.one:
        loop, mode, directory = args.one
        print(json.dumps(_run_one(loop, mode, seconds, args.quick, directory)))
        return
    rounds = 1 if args.quick else args.rounds
    modes = tuple(m for m in MODES if m == "none" or m in args.modes.split(","))
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(rounds):
        for loop in LOOPS:
            order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
            for mode in order:
                with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as directory:
                    command = [sys.executable, __file__, "--seconds", str(seconds), "--one", loop, mode, directory]
                    command += ["--quick"] if args.quick else []
                    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                results.setdefault((loop, mode), []).append(json.loads(out.strip().splitlines()[-1]))
    # Back to back, a faster writer saves more often: the loop's loss per save tells writers apart.
    print("| loop | mode | steps/s | share of none | async saves/s | loop time lost per save (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for loop in LOOPS:
        alone = statistics.median(r["steps_per_s"] for r in results[(loop, "none")])
        for mode in modes:
            rate = statistics.median(r["steps_per_s"] for r in results[(loop, mode)])
            saves = statistics.median(r["saves_per_s"] for r in results[(loop, mode)])
            lost = f"{(1 - rate / alone) / saves:.3f}" if mode.startswith("async") and saves else ""
            print(f"| {loop} | {mode} | {rate:.1f} | {rate / alone:.3f} | {saves:.2f} | {lost} |")
    print()
    copy = statistics.median(r["copy"] for loop in LOOPS for mode in modes for r in results[(loop, mode)])
    print("| mode | async save() blocked (s) | one copy of the state (s) | bound: 1.5 x copy + 5 ms |")
    print("| --- | --- | --- | --- |")
    for mode in (m for m in modes if m.startswith("async")):
        blocked = [r["blocked"] for loop in LOOPS for r in results[(loop, mode)] if r["blocked"] is not None]
        print(f"| {mode} | {statistics.median(blocked):.4f} | {copy:.4f} | {1.5 * copy + 0.005:.4f} |")


if __name__ == "__main__":
    main()
