"""Train a small Flax NNX model with optax, checkpoint it with trackpoint, "crash", resume in fresh
objects, and check that the resumed run's losses are exactly those of an uninterrupted run.

Run: ``python examples/jax_resume.py [DIRECTORY]`` (needs ``pip install "trackpoint[jax]" flax optax``).
"""

from __future__ import annotations

import sys
import tempfile

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import trackpoint as tp
import trackpoint.jax as tpj


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(4, 16, rngs=rngs)
        self.norm = nnx.BatchNorm(16, rngs=rngs)
        self.drop = nnx.Dropout(0.2, rngs=rngs)
        self.head = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        return self.head(self.drop(nnx.relu(self.norm(self.hidden(x)))))


def make(seed: int) -> tuple[Model, nnx.Optimizer]:
    model = Model(nnx.Rngs(seed, dropout=seed + 1))
    return model, nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)


@nnx.jit
def step(model: Model, optimizer: nnx.Optimizer, x: jnp.ndarray) -> jnp.ndarray:
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - x.sum(axis=1, keepdims=True)) ** 2))(model)
    optimizer.update(model, grads)
    return loss


def run(directory: str) -> bool:
    batches = [jnp.asarray(np.random.default_rng(i).random((32, 4), np.float32)) for i in range(20)]
    model, optimizer = make(0)
    manager = tp.CheckpointManager(tpj.Checkpoint(model=model, optimizer=optimizer), directory, max_to_keep=2)
    for x in batches[:10]:
        step(model, optimizer, x)
    manager.save()  # weights, BatchNorm statistics, Dropout's random stream, adamw state, step count
    uninterrupted = [float(step(model, optimizer, x)) for x in batches[10:]]

    model, optimizer = make(42)  # a fresh process would build its objects the same way
    manager = tp.CheckpointManager(tpj.Checkpoint(model=model, optimizer=optimizer), directory, max_to_keep=2)
    manager.restore_or_initialize()
    resumed = [float(step(model, optimizer, x)) for x in batches[10:]]
    same = resumed == uninterrupted
    print(f"resumed from {manager.latest_checkpoint}; the next 10 losses bit for bit: {same}")
    return same


if __name__ == "__main__":
    sys.exit(0 if run(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()) else 1)
