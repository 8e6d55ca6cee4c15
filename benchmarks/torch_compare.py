"""trackpoint.torch vs torch.save/torch.load vs torch.distributed.checkpoint vs safetensors, side by side.

    python benchmarks/torch_compare.py                 # both workloads, 3 rounds
    python benchmarks/torch_compare.py --quick         # a smoke run (a few seconds a contender)

Workloads (a model plus AdamW state after one step):
  large  8 parameters of 64 MiB: 512 MiB of weights, 1.5 GiB with exp_avg and exp_avg_sq
  many   20,000 parameters of 16 x 16 (1 KiB) in one ParameterList; 80,000 tensors with AdamW's
         (exp_avg, exp_avg_sq, step). One module, so that torch's load_state_dict, which scans
         every key once per module (a Sequential of 10,000 layers took it minutes here), is
         measured at its best

Contenders, each saving and restoring the model and its optimizer:
  trackpoint   tpt.Checkpoint(model=, optimizer=).write / .read (durable: fsync, rename)
  torch.save   torch.save({"model": state_dict, "optimizer": state_dict}) / torch.load + load_state_dict
               (no fsync)
  torch.save+fsync  the same, made durable as trackpoint's save is: written to a temporary file,
               fsynced, renamed over the old one, its directory fsynced (the fair save to compare)
  dcp          torch.distributed.checkpoint.save / load, in one process, then load_state_dict (no fsync)
  safetensors  safetensors.torch.save_model / load_model: the model only (it has no optimizer state)

Each round runs every contender in a fresh process (contenders interleaved, rounds alternating their
order); in it: one untimed save and restore, then ``--repeats`` timed saves and restores, each
starting after ``os.sync()`` with the page cache warm from the save before; then async saves
(trackpoint's ``enable_async`` and DCP's ``async_save``: until they return) beside a plain
``clone()`` of every tensor; then peak resident memory beyond the state (``/proc/self/clear_refs``
resets the peak) of one save and one restore; then ``--repeats`` restores into fresh objects (zero
parameters, an optimizer with no state, as a resumed job builds them) with the source still alive and
the files in the page cache, with their system time and peak memory beyond the new objects. Medians
over rounds and repeats, and each contender's ratio to trackpoint.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

MiB = 1 << 20
CONTENDERS = ("trackpoint", "torch.save", "torch.save+fsync", "dcp", "safetensors")
# Those that restore an optimizer with no state yet (DCP loads only the state its target holds).
FRESH = ("trackpoint", "torch.save", "safetensors")


def build(workload: str, quick: bool, fresh: bool = False) -> tuple[Any, Any]:
    """The model and its AdamW after one step; ``fresh``: as a resumed job builds them before
    its restore (parameters from ``torch.zeros``, an optimizer with no state)."""
    import torch

    torch.manual_seed(0)
    make = torch.zeros if fresh else torch.randn
    if workload == "large":
        n = (64 * MiB // 4) // (16 if quick else 1)
        model = torch.nn.Module()
        model.params = torch.nn.ParameterList([torch.nn.Parameter(make(n)) for _ in range(8)])
    else:
        count = 2_000 if quick else 20_000
        model = torch.nn.Module()
        model.params = torch.nn.ParameterList([torch.nn.Parameter(make(16, 16)) for _ in range(count)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if not fresh:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
    return model, optimizer


class Contender:
    """Save and restore one model and its optimizer in ``directory``."""

    def __init__(self, model: Any, optimizer: Any, directory: str) -> None:
        self.model, self.optimizer, self.directory = model, optimizer, directory

    def state(self) -> dict[str, Any]:
        """The state dicts the torch contenders save and load: ``{"model": ..., "optimizer": ...}``."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        """Put a loaded :meth:`state` back into the model and the optimizer."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def async_save(self) -> Callable[[], None] | None:
        """Start an async save; return what waits for it (None: no async mode)."""
        return None


class Trackpoint(Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        import trackpoint as tp
        import trackpoint.torch as tpt

        self.tp = tp
        self.ckpt = tpt.Checkpoint(model=self.model, optimizer=self.optimizer)
        self.prefix = os.path.join(self.directory, "tp")

    def save(self) -> None:
        self.ckpt.write(self.prefix)

    def restore(self) -> None:
        self.ckpt.read(self.prefix).assert_consumed()

    def async_save(self) -> Callable[[], None]:
        self.ckpt.write(self.prefix + "-async", self.tp.CheckpointOptions(enable_async=True))
        return self.ckpt.sync


class TorchSave(Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.path = os.path.join(self.directory, "state.pt")

    def save(self) -> None:
        import torch

        torch.save(self.state(), self.path)

    def restore(self) -> None:
        import torch

        self.load(torch.load(self.path, weights_only=True))


class TorchSaveDurable(TorchSave):
    def save(self) -> None:
        import torch

        temporary = self.path + ".tmp"
        with open(temporary, "wb") as f:
            torch.save(self.state(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


class DCP(Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.path = os.path.join(self.directory, "dcp")

    def save(self) -> None:
        import torch.distributed.checkpoint as dcp

        shutil.rmtree(self.path, ignore_errors=True)
        dcp.save(self.state(), checkpoint_id=self.path)

    def restore(self) -> None:
        import torch.distributed.checkpoint as dcp

        state = self.state()
        dcp.load(state, checkpoint_id=self.path)
        self.load(state)

    def async_save(self) -> Callable[[], None]:
        import torch.distributed.checkpoint as dcp

        path = self.path + "-async"
        shutil.rmtree(path, ignore_errors=True)
        future = dcp.async_save(self.state(), checkpoint_id=path)
        return future.result


class Safetensors(Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.path = os.path.join(self.directory, "model.safetensors")

    def save(self) -> None:
        import safetensors.torch

        safetensors.torch.save_model(self.model, self.path)

    def restore(self) -> None:
        import safetensors.torch

        safetensors.torch.load_model(self.model, self.path)


KINDS = {
    "trackpoint": Trackpoint,
    "torch.save": TorchSave,
    "torch.save+fsync": TorchSaveDurable,
    "dcp": DCP,
    "safetensors": Safetensors,
}


def _peak_extra(action: Callable[[], object]) -> int:
    """Peak resident bytes beyond those before ``action`` (Linux: the peak is reset first)."""

    def status(field: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
        return 0

    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status("VmRSS:")
    action()
    return status("VmHWM:") - base


def run_child(name: str, workload: str, quick: bool, repeats: int, directory: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # the copies the contenders make, on equal terms
    model, optimizer = build(workload, quick)
    contender = KINDS[name](model, optimizer, directory)
    contender.save()
    contender.restore()
    result: dict[str, Any] = {"save": [], "restore": [], "async": [], "copy": []}
    for _ in range(repeats):
        for phase, action in (("save", contender.save), ("restore", contender.restore)):
            os.sync()
            gc.collect()
            start = time.perf_counter()
            action()
            result[phase].append(time.perf_counter() - start)
    tensors = [t for t in model.state_dict().values()]
    tensors += [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    for _ in range(repeats):
        os.sync()
        start = time.perf_counter()
        copies = [t.clone() for t in tensors]
        result["copy"].append(time.perf_counter() - start)
        del copies
        wait = None
        os.sync()
        start = time.perf_counter()
        wait = contender.async_save()
        if wait is not None:
            result["async"].append(time.perf_counter() - start)
            wait()
    result["mem_save"] = _peak_extra(contender.save)
    result["mem_restore"] = _peak_extra(contender.restore)
    result["state_bytes"] = sum(t.numel() * t.element_size() for t in tensors)
    if name in FRESH:
        _fresh_restores(name, workload, quick, repeats, directory, result)
    return result


def _fresh_restores(
    name: str, workload: str, quick: bool, repeats: int, directory: str, result: dict[str, Any]
) -> None:
    """Restores into fresh objects, as a resumed job does, with the source alive in the process
    and the files in the page cache: wall and system time, and peak memory beyond the objects."""
    result["fresh"], result["fresh_sys"], result["mem_fresh"] = [], [], []
    for _ in range(repeats):
        fresh = KINDS[name](*build(workload, quick, fresh=True), directory)
        os.sync()
        gc.collect()
        timed: list[float] = []

        def restore(fresh: Contender = fresh, timed: list[float] = timed) -> None:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            start = time.perf_counter()
            fresh.restore()
            timed += [time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_stime - before]

        result["mem_fresh"].append(_peak_extra(restore))
        result["fresh"].append(timed[0])
        result["fresh_sys"].append(timed[1])
        del fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", choices=("large", "many"))
    parser.add_argument("--contender", action="append", choices=CONTENDERS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=3, metavar=("CONTENDER", "WORKLOAD", "DIRECTORY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, workload, directory = args.child
        print(json.dumps(run_child(name, workload, args.quick, args.repeats, directory)))
        return
    names = args.contender or list(CONTENDERS)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for workload in args.workload or ["many", "large"]:
        for round_index in range(args.rounds):
            order = names if round_index % 2 == 0 else names[::-1]
            for name in order:
                directory = tempfile.mkdtemp(prefix="tpt-bench-", dir=os.environ.get("TPT_BENCH_DIR"))
                try:
                    command = [sys.executable, __file__, "--child", name, workload, directory, "--repeats"]
                    command += [str(args.repeats)] + (["--quick"] if args.quick else [])
                    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
                result = json.loads(out.splitlines()[-1])
                results.setdefault(workload, {}).setdefault(name, []).append(result)
                summary = {k: [round(x, 3) for x in v] for k, v in result.items() if isinstance(v, list)}
                print(f"{workload} round {round_index + 1} {name}: {summary}", file=sys.stderr, flush=True)
        report(workload, results[workload])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def _median(runs: list[dict[str, Any]], phase: str) -> float | None:
    samples = [x for run in runs for x in run[phase]]
    return statistics.median(samples) if samples else None


def report(workload: str, runs: dict[str, list[dict[str, Any]]]) -> None:
    state = runs[next(iter(runs))][0]["state_bytes"]
    print(f"\n{workload} ({state / MiB:.0f} MiB of model and optimizer state), medians in seconds:\n")
    print("| contender | save | restore | async save returns | clone() of the state | peak extra: save / restore |")
    print("|---|---|---|---|---|---|")
    base = (
        {phase: _median(runs["trackpoint"], phase) for phase in ("save", "restore", "async")}
        if "trackpoint" in runs
        else {}
    )
    for name, contender_runs in runs.items():
        cells = []
        for phase in ("save", "restore", "async", "copy"):
            value = _median(contender_runs, phase)
            if value is None:
                cells.append("")
                continue
            ratio = (
                f" ({value / base[phase]:.2f}x tp)"
                if base.get(phase) and name != "trackpoint" and phase != "copy"
                else ""
            )
            cells.append(f"{value:.3f}{ratio}")
        mem = [statistics.median(run[key] for run in contender_runs) / MiB for key in ("mem_save", "mem_restore")]
        print(f"| {name} | " + " | ".join(cells) + f" | {mem[0]:.0f} / {mem[1]:.0f} MiB |")
    fresh = {name: contender_runs for name, contender_runs in runs.items() if "fresh" in contender_runs[0]}
    if not fresh:
        return
    print("\nRestore into fresh objects (zeros, an optimizer with no state; the source alive, the files cached):\n")
    print("| contender | restore | of which system time | peak extra memory |")
    print("|---|---|---|---|")
    base_fresh = _median(fresh["trackpoint"], "fresh") if "trackpoint" in fresh else None
    for name, contender_runs in fresh.items():
        wall = _median(contender_runs, "fresh") or 0.0
        ratio = f" ({wall / base_fresh:.2f}x tp)" if base_fresh and name != "trackpoint" else ""
        system = _median(contender_runs, "fresh_sys") or 0.0
        peak = (_median(contender_runs, "mem_fresh") or 0) / MiB
        note = " (model only)" if name == "safetensors" else ""
        print(f"| {name}{note} | {wall:.3f}{ratio} | {system:.3f} | {peak:.0f} MiB |")


if __name__ == "__main__":
    main()
