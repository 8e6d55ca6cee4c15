"""Saves and restores of 1 GiB of sharded state from 1, 2 and 4 processes: trackpoint against
torch.distributed.checkpoint (DCP), with the disk's own ceiling beside them.

    python benchmarks/distributed_compare.py              # 1, 2, 4 ranks; 3 rounds
    python benchmarks/distributed_compare.py --quick      # 64 MiB, one round (a smoke run)

State: 16 tensors of 4096 x 4096 float32 (64 MiB each, 1 GiB in all), each split by rows over
the ranks: rank r holds rows [r * 4096 / W, (r + 1) * 4096 / W) of every tensor.

Contenders, each on a gloo group of W processes on this machine (file rendezvous):
  trackpoint  tp.Checkpoint(model=m).write / .read; m's tensors are ``ShardedVariable`` blocks.
              One TF checkpoint: each rank writes its own data file, rank 0 the index.
  dcp         torch.distributed.checkpoint.save / load of ``{name: DTensor}`` (``Shard(0)`` on a
              CPU device mesh), loaded in place. Its default FileSystemWriter fsyncs too.
  disk        each rank writes its rows to a file of its own and fsyncs it (the ceiling a save
              can reach); its restore reads the files back with ``readinto``.

Each (contender, W) runs in fresh processes, contenders interleaved, rounds alternating the
order. In a run: one untimed save and restore, then ``--repeats`` timed ones. Each timed save
starts after ``os.sync()`` on a new directory and is timed on rank 0 from a barrier to the
barrier after every rank returned; each restore follows its save (page cache warm the same way
for every contender) and is checked against the saved values. Medians over rounds and repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

MiB = 1 << 20
CONTENDERS = ("trackpoint", "dcp", "disk")
ROWS = COLS = 4096
TENSORS = 16


def local_rows(rank: int, world: int, rows: int) -> tuple[int, int]:
    return rank * rows // world, (rank + 1) * rows // world


def build(rank: int, world: int, quick: bool) -> tuple[dict[str, np.ndarray], tuple[int, int], int]:
    """This rank's block of every tensor, the full shape, and this rank's first row."""
    rows = ROWS // 4 if quick else ROWS
    start, stop = local_rows(rank, world, rows)
    rng = np.random.default_rng(rank)
    blocks = {f"t{i:02d}": rng.standard_normal((stop - start, COLS), dtype=np.float32) for i in range(TENSORS)}
    return blocks, (rows, COLS), start


class Trackpoint:
    def __init__(self, blocks: dict[str, np.ndarray], full: tuple[int, int], start: int) -> None:
        import trackpoint as tp
        from trackpoint.distributed import ShardedVariable

        self.model = tp.Module()
        self.variables = {name: ShardedVariable(block, full, (start, 0)) for name, block in blocks.items()}
        for name, variable in self.variables.items():
            setattr(self.model, name, variable)
        self.ckpt = tp.Checkpoint(model=self.model)

    def clear(self) -> None:
        for variable in self.variables.values():
            variable.assign(np.zeros(variable.shape, np.float32))

    def save(self, directory: str) -> None:
        self.ckpt.write(os.path.join(directory, "ckpt"))

    def restore(self, directory: str) -> dict[str, np.ndarray]:
        self.ckpt.read(os.path.join(directory, "ckpt")).assert_consumed()
        return {name: variable.numpy() for name, variable in self.variables.items()}


class DCP:
    def __init__(self, blocks: dict[str, np.ndarray], full: tuple[int, int], start: int) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        self.state = {
            name: DTensor.from_local(torch.from_numpy(block), mesh, [Shard(0)], run_check=False)
            for name, block in blocks.items()
        }

    def clear(self) -> None:
        for value in self.state.values():
            value.to_local().zero_()

    def save(self, directory: str) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(self.state, checkpoint_id=directory)

    def restore(self, directory: str) -> dict[str, np.ndarray]:
        import torch.distributed.checkpoint as dcp

        dcp.load(self.state, checkpoint_id=directory)
        return {name: value.to_local().numpy() for name, value in self.state.items()}


class Disk:
    def __init__(self, blocks: dict[str, np.ndarray], full: tuple[int, int], start: int) -> None:
        import torch.distributed as dist

        self.blocks, self.rank = blocks, dist.get_rank()

    def clear(self) -> None:
        for block in self.blocks.values():
            block.fill(0)

    def save(self, directory: str) -> None:
        path = os.path.join(directory, f"rank-{self.rank}")
        with open(path, "wb", buffering=0) as f:
            f.writelines(memoryview(block).cast("B") for block in self.blocks.values())
            os.fsync(f.fileno())

    def restore(self, directory: str) -> dict[str, np.ndarray]:
        with open(os.path.join(directory, f"rank-{self.rank}"), "rb", buffering=0) as f:
            for block in self.blocks.values():
                f.readinto(memoryview(block).cast("B"))
        return self.blocks


KINDS = {"trackpoint": Trackpoint, "dcp": DCP, "disk": Disk}


def rank_main(rank: int, world: int, name: str, work: str, repeats: int, quick: bool) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{work}/rendezvous", rank=rank, world_size=world)
    blocks, full, start = build(rank, world, quick)
    expected = {key: value.copy() for key, value in blocks.items()}
    contender = KINDS[name](blocks, full, start)  # holds ``blocks`` (or its own copy) as its state
    saves: list[float] = []
    restores: list[float] = []
    for attempt in range(repeats + 1):
        directory = os.path.join(work, f"save-{attempt}")
        if rank == 0:
            os.makedirs(directory)
            os.sync()
        dist.barrier()
        began = time.perf_counter()
        contender.save(directory)
        dist.barrier()
        saved = time.perf_counter() - began
        contender.clear()  # a restore that reads nothing fails the check below
        dist.barrier()
        began = time.perf_counter()
        restored = contender.restore(directory)
        dist.barrier()
        restore_time = time.perf_counter() - began
        for key, value in expected.items():
            if not np.array_equal(restored[key], value):
                raise AssertionError(f"{name} rank {rank}: {key} restored wrong")
        if attempt:
            saves.append(saved)
            restores.append(restore_time)
        dist.barrier()
        if rank == 0:
            shutil.rmtree(directory)
    if rank == 0:
        total = sum(block.nbytes for block in expected.values()) * world
        with open(os.path.join(work, "result.json"), "w") as f:
            json.dump({"save": saves, "restore": restores, "bytes": total}, f)
    dist.destroy_process_group()


def run(name: str, world: int, repeats: int, quick: bool) -> dict[str, Any]:
    import multiprocessing

    work = tempfile.mkdtemp(prefix="tp-dist-bench-", dir=os.environ.get("TP_BENCH_DIR"))
    try:
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=rank_main, args=(r, world, name, work, repeats, quick)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise RuntimeError(f"{name} with {world} ranks failed: exit codes {[p.exitcode for p in procs]}")
        with open(os.path.join(work, "result.json")) as f:
            return dict(json.load(f))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, action="append")
    parser.add_argument("--contender", action="append", choices=CONTENDERS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    names = args.contender or list(CONTENDERS)
    worlds = args.ranks or [1, 2, 4]
    rounds = 1 if args.quick else args.rounds
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for round_index in range(rounds):
        for world in worlds:
            for name in names if round_index % 2 == 0 else names[::-1]:
                result = run(name, world, args.repeats, args.quick)
                results.setdefault(str(world), {}).setdefault(name, []).append(result)
                print(
                    f"round {round_index + 1}, {world} ranks, {name}: save {[round(x, 3) for x in result['save']]} "
                    f"restore {[round(x, 3) for x in result['restore']]}",
                    file=sys.stderr,
                    flush=True,
                )
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def report(results: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    def median(runs: list[dict[str, Any]], phase: str) -> float:
        return statistics.median(x for run in runs for x in run[phase])

    first = next(iter(results.values()))
    total = next(iter(first.values()))[0]["bytes"]
    print(f"\n{total / MiB:.0f} MiB of sharded state, medians in seconds (throughput; ratio to trackpoint):\n")
    print("| ranks | contender | save | restore |")
    print("|---|---|---|---|")
    one = {phase: median(results["1"]["trackpoint"], phase) for phase in ("save", "restore")} if "1" in results else {}
    for world, runs in results.items():
        base = (
            {phase: median(runs["trackpoint"], phase) for phase in ("save", "restore")} if "trackpoint" in runs else {}
        )
        for name, contender_runs in runs.items():
            cells = []
            for phase in ("save", "restore"):
                value = median(contender_runs, phase)
                cell = f"{value:.3f} ({total / MiB / value:.0f} MiB/s"
                if base and name != "trackpoint":
                    cell += f"; {value / base[phase]:.2f}x"
                elif one and name == "trackpoint" and world != "1":
                    cell += f"; {one[phase] / value:.2f}x the throughput of 1 rank"
                cells.append(cell + ")")
            print(f"| {world} | {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
