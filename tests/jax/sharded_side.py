"""Sharded arrays through ``trackpoint.jax`` on 8 CPU host devices, in a process of its own (the device
count is fixed when JAX starts): ``python -m tests.jax.sharded_side DIR out.json``.

Saves a tree sharded over a (2, 4) mesh, then restores it onto one device, a (4, 2) mesh and an
(8,) mesh, with ``trackpoint.jax.restore`` and into live arrays through a ``Checkpoint``.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

import trackpoint as tp
import trackpoint.jax as tpj
from trackpoint._io import BundleReader, slices
from trackpoint.jax._shards import saved_value, writers


def main(root: str, out: str) -> None:
    devices = jax.devices()
    assert len(devices) == 8, devices
    mesh = Mesh(np.array(devices).reshape(2, 4), ("a", "b"))
    full = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    rows = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    keys = jax.random.split(jax.random.key(7), 8)
    tree = {
        "x": jax.device_put(full, NamedSharding(mesh, P("a", "b"))),
        "y": jax.device_put(np.arange(5, dtype=np.int32), NamedSharding(mesh, P())),  # replicated
        "z": jax.device_put(rows, NamedSharding(mesh, P("a"))),  # 2 shards, each on 4 devices
        "k": jax.device_put(keys, NamedSharding(Mesh(np.array(devices), ("d",)), P("d"))),  # typed keys, 8 shards
    }
    saved = {name: saved_value(tree[name]) for name in ("x", "z")}
    shares = all(
        any(np.shares_memory(part.value, np.asarray(shard.data)) for shard in tree[name].addressable_shards)
        for name, value in saved.items()
        for part in value.parts
    )
    prefix = tpj.Checkpoint(state=tree).save(os.path.join(root, "ckpt"))
    np.savez(
        os.path.join(root, "values.npz"),
        x=full,
        y=np.arange(5, dtype=np.int32),
        z=rows,
        k=np.asarray(jax.random.key_data(keys)),
    )
    targets = {
        "one device": SingleDeviceSharding(devices[3]),
        "(4, 2) mesh": NamedSharding(Mesh(np.array(devices).reshape(4, 2), ("a", "b")), P("a", "b")),
        "(8,) mesh": NamedSharding(Mesh(np.array(devices), ("d",)), P("d")),
    }
    with tp.CheckpointView(prefix) as view:
        layout = {name: view.describe(f"state/{name}/.ATTRIBUTES/VARIABLE_VALUE") for name in ("x", "y", "z", "k")}
    with BundleReader(prefix) as bundle:
        stored = {e.key: sorted(slices.extents_from_proto(p) for p in e.slices) for e in bundle.entries() if e.slices}
    results: dict = {
        "prefix": prefix,
        "slices": stored,
        "layout": {name: list(value[:2]) for name, value in layout.items()},
        "views": shares,
        "writers": {name: _writers(tree[name]) for name in ("x", "z")},
    }
    for label, sharding in targets.items():
        target = {
            "state": {
                "x": jax.ShapeDtypeStruct((8, 12), jnp.float32, sharding=sharding),
                "y": tree["y"],
                "z": jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=sharding),
                "k": tree["k"],
            }
        }
        restored = tpj.restore(prefix, target)["state"]
        live = tpj.Checkpoint(
            state={
                "x": jax.device_put(np.zeros((8, 12), np.float32), sharding),
                "y": tree["y"],
                "z": jax.device_put(np.zeros((8, 4), np.float32), sharding),
                "k": jax.random.split(jax.random.key(0), 8),
            }
        )
        live.restore(prefix).assert_consumed()
        others = all(
            np.array_equal(np.asarray(restored["z"]), rows)
            and np.array_equal(np.asarray(live.state.value["z"]), rows)
            and np.array_equal(jax.random.key_data(value["k"]), jax.random.key_data(keys))
            for value in (restored, live.state.value)
        )
        results[label] = {
            "values": bool(np.array_equal(np.asarray(restored["x"]), full)),
            "sharding": restored["x"].sharding == sharding,
            "live_values": bool(np.array_equal(np.asarray(live.state.value["x"]), full)),
            "live_sharding": live.state.value["x"].sharding == sharding,
            "devices": len(restored["x"].sharding.device_set),
            "others": bool(others),
        }
    results["refusals"] = _refusals(prefix, targets["(4, 2) mesh"])
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


def _refusals(prefix: str, sharding: NamedSharding) -> dict[str, str]:
    """What restoring into spread live arrays of the wrong dtype or shape raises; each must leave
    every live array as it was."""
    out = {}
    for label, wrong in (("dtype", np.zeros((8, 12), np.int32)), ("shape", np.zeros((8, 8), np.float32))):
        live = tpj.Checkpoint(state={"x": jax.device_put(wrong, sharding)})
        before = live.state.value["x"]
        try:
            live.restore(prefix).expect_partial()
            out[label] = "restored"
        except tp.errors.InvalidArgumentError as exc:
            kept = live.state.value["x"] is before and bool(np.array_equal(np.asarray(before), wrong))
            out[label] = f"{'kept' if kept else 'CHANGED'}: {exc}"
    return out


def _writers(array: jax.Array) -> list[str]:
    """The device that writes each stored slice of ``array``, in slice order (on the CPU, JAX may
    give replicas one buffer, so the memory alone cannot tell which replica a slice came from)."""
    chosen = writers(array.sharding, tuple(array.shape))
    return [str(chosen[tuple((s, s + n) for s, n in part.extents)]) for part in saved_value(array).parts]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
