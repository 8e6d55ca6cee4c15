"""One process of a ``jax.distributed`` job on 127.0.0.1, with 4 CPU host devices:
``python -m tests.jax.distributed_side PROCESS_ID PORT DIR OUT``.

1. Both processes save one checkpoint of arrays spread over a (2, 4) mesh of the job's 8
   devices, then restore it onto a (4, 2) mesh (``restore`` and live arrays); then each
   restores its rows from a copy of the checkpoint whose process-0 data file is damaged but
   for the object graph: process 1, which needs none of that file's slices, succeeds.
2. Process 1 exits once its part of a second save starts being written; process 0's save must
   raise ``CoordinationError`` (a 4 s timeout).

Writes a JSON report to OUT, then leaves with ``os._exit``: ``jax.distributed.shutdown`` waits
for every process, and one never comes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback
from typing import Any

if __name__ == "__main__":  # a process of the job; the test imports X, Y, Z and must keep its own flags
    # 4 devices, computing on one thread: the suite runs beside, on a machine of 2 cores.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4 --xla_cpu_multi_thread_eigen=false"
    )

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import trackpoint as tp
import trackpoint.jax as tpj
from trackpoint._io import OBJECT_GRAPH_KEY, BundleReader
from trackpoint.distributed import JaxCoordinator
from trackpoint.sharding import ShardingCallback

X = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
Z = np.arange(8 * 4, dtype=np.float32).reshape(8, 4) * 10
Y = np.arange(6, dtype=np.int32)


def _tree(mesh: Mesh) -> dict[str, Any]:
    def put(value: np.ndarray, spec: P) -> jax.Array:
        sharding = NamedSharding(mesh, spec)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return {"x": put(X, P("a", "b")), "z": put(Z, P("a")), "y": put(Y, P()), "key": jax.random.key(5)}


def _local_equal(array: jax.Array, full: np.ndarray) -> bool:
    """Whether each of this process's shards of ``array`` holds its part of ``full``."""
    return all(np.array_equal(np.asarray(shard.data), full[shard.index]) for shard in array.addressable_shards)


def save(process: int, root: str) -> dict[str, Any]:
    devices = jax.devices()
    mesh = Mesh(np.array(devices).reshape(2, 4), ("a", "b"))
    tree = _tree(mesh)
    prefix = tpj.Checkpoint(state=tree).save(os.path.join(root, "ckpt"))
    other = NamedSharding(Mesh(np.array(devices).reshape(4, 2), ("a", "b")), P("a", "b"))
    target = {
        "state": {
            "x": jax.ShapeDtypeStruct(X.shape, jnp.float32, sharding=other),
            "z": jax.ShapeDtypeStruct(Z.shape, jnp.float32, sharding=other),
            "y": tree["y"],
            "key": tree["key"],
        }
    }
    restored = tpj.restore(prefix, target)["state"]
    live = tpj.Checkpoint(
        state={
            "x": jax.device_put(np.zeros_like(X), other),
            "z": jax.device_put(np.zeros_like(Z), other),
            "y": tree["y"],
            "key": jax.random.key(0),
        }
    )
    live.restore(prefix).assert_consumed()
    report: dict[str, Any] = {
        "prefix": prefix,
        "process_count": jax.process_count(),
        "restored": all(
            _local_equal(value["x"], X) and _local_equal(value["z"], Z) and value["x"].sharding == other
            for value in (restored, live.state.value)
        ),
        "key": bool(jnp.array_equal(jax.random.key_data(live.state.value["key"]), jax.random.key_data(tree["key"]))),
        "files": sorted(os.listdir(root)),
    }
    client = jax._src.distributed.global_state.client
    client.wait_at_barrier("restored", 60_000)
    # A copy of the checkpoint whose process-0 data file is damaged everywhere but in the object
    # graph: process 1's devices hold rows 4-7 of x on the (2, 4) mesh, all stored in process 1's
    # file, so its restore never reads a damaged byte; process 0's needs rows 0-3.
    partial = os.path.join(root, "partial")
    if process == 0:
        os.makedirs(partial)
        for name in os.listdir(root):
            if name.startswith("ckpt-1."):
                shutil.copy(os.path.join(root, name), partial)
        with BundleReader(prefix) as bundle:
            graph = next(e for e in bundle.entries() if e.key == OBJECT_GRAPH_KEY)
        assert graph.shard_id == 0
        damaged = os.path.join(partial, "ckpt-1.data-00000-of-00002")
        data = np.fromfile(damaged, dtype=np.uint8)
        keep = data[graph.offset : graph.offset + graph.size].copy()
        data ^= 0xFF
        data[graph.offset : graph.offset + graph.size] = keep
        data.tofile(damaged)
    client.wait_at_barrier("copied", 60_000)
    sharding = NamedSharding(mesh, P("a", "b"))
    try:
        tree_part, _ = tpj.restore(
            os.path.join(partial, "ckpt-1"),
            {"state": {"x": jax.ShapeDtypeStruct(X.shape, jnp.float32, sharding=sharding)}},
            strict=False,
        )
        report["partial"] = "restored" if _local_equal(tree_part["state"]["x"], X) else "wrong values"
    except tp.errors.CheckpointError as exc:
        report["partial"] = f"{type(exc).__name__}: {exc}"
    client.wait_at_barrier("done", 60_000)
    return report


class _DieWhileWriting(ShardingCallback):
    """Ends the process as its part of a save starts being written (after the plan was agreed)."""

    @property
    def description(self) -> str:
        return "dies while writing"

    def __call__(self, shardable_tensors: Any) -> Any:
        os._exit(3)


def kill(process: int, root: str) -> dict[str, Any]:
    """Process 1 dies once its part of a save starts being written; process 0's save must raise."""
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b"))
    tree = _tree(mesh)
    options = tp.CheckpointOptions(coordinator=JaxCoordinator(timeout=4))
    if process == 1:
        options.experimental_sharding_callback = _DieWhileWriting()
    directory = os.path.join(root, "killed")
    start = time.monotonic()
    try:
        tpj.Checkpoint(state=tree).save(os.path.join(directory, "ckpt"), options=options)
        outcome = "saved"
    except tp.errors.CoordinationError as exc:
        outcome = f"CoordinationError: {exc}"
    return {"outcome": outcome, "seconds": time.monotonic() - start, "files": sorted(os.listdir(directory))}


def main(process: int, port: int, root: str, out: str) -> None:
    def report_so_far(report: dict[str, Any]) -> None:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)

    report: dict[str, Any] = {}
    try:
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process)
        report = save(process, root)
        report_so_far(report)  # process 1 dies in what follows
        report["kill"] = kill(process, root)
    except BaseException:  # noqa: BLE001 - the report carries it to the test, which fails on it
        report["error"] = traceback.format_exc()
    report_so_far(report)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
