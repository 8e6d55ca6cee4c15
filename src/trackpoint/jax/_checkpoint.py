"""``trackpoint.jax.Checkpoint``: pytrees, Flax NNX objects and optax states in a ``tp.Checkpoint``."""

from __future__ import annotations

from typing import Any

import trackpoint as tp
from trackpoint import Trackable
from trackpoint.jax._nodes import NnxNode, PytreeNode, array_node, is_nnx

__all__ = ["Checkpoint"]


def _wrap(name: str, value: Any) -> Trackable:
    import jax

    if isinstance(value, Trackable):
        return value
    if is_nnx(value):
        return NnxNode(value)
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(value)):
        return array_node(value, name)
    return PytreeNode(value)


class Checkpoint(tp.Checkpoint):
    """``tp.Checkpoint`` for JAX: pytrees of arrays, Flax NNX modules and optimizers, optax states.

    Keys are pytree paths (``params/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE``), so TensorFlow's
    ``tf.train.load_checkpoint`` reads every leaf whole, and ``CheckpointManager``, async saves,
    ``max_to_keep`` and object-store URLs work as for any ``tp.Checkpoint``. Typed PRNG keys
    (``jax.random.key``, ``nnx.Rngs``) come back keys of their implementation. A restore fills
    NNX objects in place; a pytree cannot change in place, so ``ckpt.<name>.value`` is the tree
    with the restored leaves (same structure and container types), each on the sharding its
    leaf had.

    Examples:
        >>> import tempfile
        >>> import jax.numpy as jnp
        >>> import trackpoint.jax as tpj
        >>> ckpt = tpj.Checkpoint(params={"w": jnp.ones((2, 3)), "b": (jnp.zeros(3), jnp.arange(2))})
        >>> path = ckpt.save(tempfile.mkdtemp() + "/ckpt")
        >>> fresh = tpj.Checkpoint(params={"w": jnp.zeros((2, 3)), "b": (jnp.ones(3), jnp.zeros(2, int))})
        >>> fresh.restore(path).assert_consumed().__class__.__name__
        'CheckpointLoadStatus'
        >>> fresh.params.value["w"].sum().item(), type(fresh.params.value["b"]).__name__
        (6.0, 'tuple')
    """

    def __init__(self, root: Any = None, **items: Any) -> None:
        wrapped = {name: _wrap(name, value) for name, value in items.items()}
        super().__init__(_wrap("", root) if root is not None else None, **wrapped)
