"""JAX, Flax NNX and optax in TensorFlow checkpoints (``pip install "trackpoint[jax]"``).

``import trackpoint`` imports no JAX; ``import trackpoint.jax`` imports none until a function
or class of it is used on JAX values.

- :class:`Checkpoint`: pytrees, NNX modules and optimizers, optax states in a ``tp.Checkpoint``
  (``CheckpointManager``, async saves, object stores), keys by pytree path.
- :func:`restore`: a checkpoint into the structure of a target pytree of arrays or
  ``jax.ShapeDtypeStruct``\\ s, on their shardings, strict by default.
"""

from __future__ import annotations

from trackpoint.jax._checkpoint import Checkpoint
from trackpoint.jax._nodes import LeafNode, NnxNode, PytreeNode
from trackpoint.jax._restore import RestoreReport, restore

__all__ = ["Checkpoint", "LeafNode", "NnxNode", "PytreeNode", "RestoreReport", "restore"]
