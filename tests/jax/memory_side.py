"""Peak memory of saving a large JAX array, in a process of its own: ``python -m tests.jax.memory_side DIR MODE``.

Prints the array's bytes and how much the process's peak RSS rose during the save (``MODE``:
``sync``; ``async``, which also runs a donating computation on the array meanwhile, then checks
the file holds the array as it was when saved; ``sharded``, a sync save of the array spread over
8 CPU host devices). The peak is reset just before the save (``/proc/self/clear_refs``), so
what making the array took does not hide what the save takes.
"""

from __future__ import annotations

import os
import sys

if sys.argv[2:3] == ["sharded"]:  # the device count is fixed when JAX starts
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import trackpoint as tp
import trackpoint.jax as tpj

COUNT = 16 << 20  # float32s: 64 MiB


def reset_peak() -> int:
    """Reset the process's peak RSS to its current RSS (Linux); return that, in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return peak()


def peak() -> int:
    """The process's peak RSS since the last reset, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(directory: str, mode: str) -> None:
    x = jnp.arange(COUNT, dtype=jnp.float32)
    if mode == "sharded":
        x = jax.device_put(x, NamedSharding(Mesh(np.array(jax.devices()), ("d",)), P("d")))
        assert len(x.addressable_shards) == 8
    x.block_until_ready()
    first = np.asarray(x[:4]).tolist()
    ckpt = tpj.Checkpoint(params={"x": x})
    before = reset_peak()
    path = ckpt.save(os.path.join(directory, "ckpt"), options=tp.CheckpointOptions(enable_async=mode == "async"))
    if mode == "async":
        rise = peak() - before  # the snapshot an async save takes before it returns
        step = jax.jit(lambda a: a * 2.0, donate_argnums=0)
        x = step(x).block_until_ready()  # the training loop goes on, offering its buffers for reuse
        ckpt.sync()
    else:
        rise = peak() - before
    with tp.load_checkpoint(path) as reader:
        saved = reader.get_tensor("params/x/.ATTRIBUTES/VARIABLE_VALUE")
    assert saved[:4].tolist() == first and saved[-1] == np.float32(COUNT - 1), "the file holds other values"
    print(COUNT * 4, rise)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
