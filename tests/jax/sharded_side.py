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

import trackpoint.jax as tpj


def main(root: str, out: str) -> None:
    devices = jax.devices()
    assert len(devices) == 8, devices
    mesh = Mesh(np.array(devices).reshape(2, 4), ("a", "b"))
    full = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    tree = {
        "x": jax.device_put(full, NamedSharding(mesh, P("a", "b"))),
        "y": jax.device_put(np.arange(5, dtype=np.int32), NamedSharding(mesh, P())),  # replicated
    }
    prefix = tpj.Checkpoint(state=tree).save(os.path.join(root, "ckpt"))
    np.savez(os.path.join(root, "values.npz"), x=full, y=np.arange(5, dtype=np.int32))
    targets = {
        "one device": SingleDeviceSharding(devices[3]),
        "(4, 2) mesh": NamedSharding(Mesh(np.array(devices).reshape(4, 2), ("a", "b")), P("a", "b")),
        "(8,) mesh": NamedSharding(Mesh(np.array(devices), ("d",)), P("d")),
    }
    results: dict = {"prefix": prefix}
    for label, sharding in targets.items():
        target = {"state": {"x": jax.ShapeDtypeStruct((8, 12), jnp.float32, sharding=sharding), "y": tree["y"]}}
        restored = tpj.restore(prefix, target)["state"]
        live = tpj.Checkpoint(state={"x": jax.device_put(np.zeros((8, 12), np.float32), sharding), "y": tree["y"]})
        live.restore(prefix).assert_consumed()
        results[label] = {
            "values": bool(np.array_equal(np.asarray(restored["x"]), full)),
            "sharding": restored["x"].sharding == sharding,
            "live_values": bool(np.array_equal(np.asarray(live.state.value["x"]), full)),
            "live_sharding": live.state.value["x"].sharding == sharding,
            "devices": len(restored["x"].sharding.device_set),
        }
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
