"""Peak memory of saving a large JAX array, in a process of its own: ``python -m tests.jax.memory_side DIR MODE``.

Prints the array's bytes and how much the process's peak RSS rose during the save (``MODE``:
``sync`` or ``async``; an async save also runs a donating computation on the array meanwhile,
then checks the file holds the array as it was when saved).
"""

from __future__ import annotations

import os
import resource
import sys

import jax
import jax.numpy as jnp
import numpy as np

import trackpoint as tp
import trackpoint.jax as tpj


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(directory: str, mode: str) -> None:
    x = jnp.arange(64 << 20, dtype=jnp.float32)  # 256 MiB
    x.block_until_ready()
    first = np.asarray(x[:4]).tolist()
    ckpt = tpj.Checkpoint(params={"x": x})
    before = _peak()
    path = ckpt.save(os.path.join(directory, "ckpt"), options=tp.CheckpointOptions(enable_async=mode == "async"))
    if mode == "async":
        rise = _peak() - before  # the snapshot an async save takes before it returns
        step = jax.jit(lambda a: a * 2.0, donate_argnums=0)
        x = step(x).block_until_ready()  # the training loop goes on, offering its buffers for reuse
        ckpt.sync()
    else:
        rise = _peak() - before
    with tp.load_checkpoint(path) as reader:
        saved = reader.get_tensor("params/x/.ATTRIBUTES/VARIABLE_VALUE")
    assert saved[:4].tolist() == first and saved[-1] == np.float32((64 << 20) - 1), "the file holds other values"
    print(64 << 22, rise)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
