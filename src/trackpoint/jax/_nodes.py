"""JAX values as nodes of a checkpoint's object graph (the extension protocol, ``trackpoint.protocol``).

A pytree (dicts, lists, tuples, NamedTuples, registered dataclasses, optax states) or the state
of a Flax NNX module or optimizer becomes a tree of nodes named by its key paths
(``params/dense/kernel``): each leaf a :class:`LeafNode` holding ``VARIABLE_VALUE`` (TensorFlow
reads it whole), and, for a typed PRNG key (``jax.random.key``, ``nnx.Rngs``), its key data
there and its implementation's name beside it (``prng_impl``), so it comes back a key of the same
kind. A restore puts each value back where it came from, on the sharding the live value has:
into the NNX variable, or into the pytree's holder (:class:`PytreeNode`, whose ``value`` is the
tree). No JAX module is imported at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError
from trackpoint.jax._shards import Bounds, array_from_regions, is_spread, own_box, saved_value
from trackpoint.protocol import VARIABLE_VALUE

__all__ = [
    "ArrayNode",
    "LeafNode",
    "NnxNode",
    "PytreeNode",
    "SpreadArrayNode",
    "SpreadLeafNode",
    "TreeNode",
    "array_node",
    "is_nnx",
    "is_typed_key",
    "leaf_node",
    "path_names",
    "place",
]

#: The tensor beside a typed PRNG key's data: the name of its implementation (``threefry2x32``).
PRNG_IMPL = "prng_impl"


def _jax() -> Any:
    import jax

    return jax


def is_typed_key(value: Any) -> bool:
    """Whether ``value`` is a typed PRNG key array (``jax.random.key``), not plain uint32 data."""
    jax = _jax()
    return isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key)


def path_names(path: Sequence[Any]) -> list[str]:
    """A JAX key path (or an NNX state path of str and int) as local names: ``['params', 'dense', 'kernel']``."""
    names = []
    for entry in path:
        for attribute in ("key", "idx", "name"):  # DictKey, SequenceKey/FlattenedIndexKey, GetAttrKey
            if hasattr(entry, attribute):
                entry = getattr(entry, attribute)
                break
        names.append(str(entry))
    return names


class LeafNode(Trackable):
    """One leaf: ``get()`` gives its current value, ``put(new)`` installs a restored one."""

    #: A JAX array never changes in place, and JAX will not donate a buffer to a computation while
    #: a NumPy view of it (what this node offers a save) is alive: an async save keeps the views
    #: rather than copying the state (``protocol.Saveable``; ``tests/jax/test_jax_memory.py``).
    _tp_copy_on_write = True

    def __init__(self, get: Callable[[], Any], put: Callable[[Any], None], path: str) -> None:
        self._get = get
        self._put = put
        self._path = path

    def __repr__(self) -> str:
        return f"<trackpoint.jax.LeafNode {self._path!r}>"

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return (VARIABLE_VALUE, PRNG_IMPL) if is_typed_key(self._get()) else (VARIABLE_VALUE,)

    def _checkpoint_full_name(self) -> str:
        return self._path

    def _serialize_to_tensors(self) -> dict[str, Any]:
        value = self._get()
        if is_typed_key(value):
            jax = _jax()
            impl = str(jax.random.key_impl(value))
            return {VARIABLE_VALUE: _saved(jax.random.key_data(value)), PRNG_IMPL: impl.encode()}
        return {VARIABLE_VALUE: _saved(value)}

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> Any:
        current = self._get()
        value = np.asarray(tensors[VARIABLE_VALUE])
        jax = _jax()
        if is_typed_key(current):
            impl = str(jax.random.key_impl(current))
            stored = tensors.get(PRNG_IMPL)
            if stored is None or bytes(stored).decode() != impl:
                raise InvalidArgumentError(
                    f"{self._path} is a {impl} PRNG key, the checkpoint holds "
                    f"{'plain data' if stored is None else bytes(stored).decode() + ' key data'}"
                )
            expected = jax.random.key_data(current)
        else:
            expected = current
        shape, dtype = tuple(np.shape(expected)), np.dtype(expected.dtype)
        if value.shape != shape or value.dtype != dtype:
            raise InvalidArgumentError(
                f"{self._path} is {dtype.name}{list(shape)}, the checkpoint holds {value.dtype.name}{list(value.shape)}"
            )
        return value

    def _tp_take_restored(self, checked: np.ndarray) -> None:
        self._put(place(checked, self._get()))


def _saved(value: Any) -> Any:
    """What a save stores for a leaf: a JAX array's own memory, by shard (``_shards.saved_value``)."""
    return saved_value(value) if isinstance(value, _jax().Array) else np.asarray(value)


class _ByRegion:
    """For a leaf whose live array is spread over devices (``_shards.is_spread``): a restore reads
    only this process's part of the stored tensor (``protocol.Region``) and places each device's
    piece of it (``protocol.ValueOwner``)."""

    _tp_takes_value = True
    _get: Callable[[], Any]
    _put: Callable[[Any], None]
    _path: str

    def _tp_region(self) -> tuple[tuple[int, ...], Bounds]:
        current = self._get()
        shape = tuple(current.shape)
        if is_spread(current):
            return shape, own_box(current.sharding, shape)
        return shape, tuple((0, size) for size in shape)

    def _tp_destination(self) -> np.ndarray | None:
        return None

    def _tp_check_value(self, value: Any) -> tuple[np.ndarray, Bounds]:
        current = self._get()
        region = np.asarray(value)
        _, box = self._tp_region()
        dtype = np.dtype(current.dtype)
        if region.dtype != dtype:
            raise InvalidArgumentError(
                f"{self._path} is {dtype.name}{list(current.shape)}, the checkpoint holds {region.dtype.name} values"
            )
        return region, box

    def _tp_take_value(self, checked: tuple[np.ndarray, Bounds]) -> None:
        region, box = checked
        current = self._get()
        if not is_spread(current):
            self._put(place(region, current))
            return

        def read(bounds: Bounds) -> np.ndarray:
            return region[tuple(slice(start - low, stop - low) for (start, stop), (low, _) in zip(bounds, box))]

        self._put(array_from_regions(tuple(current.shape), current.sharding, read))


def _by_region(value: Any) -> bool:
    """Whether a leaf holding ``value`` is restored by region (a plain array spread over devices)."""
    return is_spread(value) and not is_typed_key(value)


def leaf_node(get: Callable[[], Any], put: Callable[[Any], None], path: str) -> LeafNode:
    """The node of one leaf of a tree: read by region when its live array is spread over devices."""
    return SpreadLeafNode(get, put, path) if _by_region(get()) else LeafNode(get, put, path)


def array_node(value: Any, path: str) -> ArrayNode:
    """The node of a single array given for a checkpoint, read by region as :func:`leaf_node`'s are."""
    return SpreadArrayNode(value, path) if _by_region(value) else ArrayNode(value, path)


def place(value: np.ndarray, like: Any) -> Any:
    """``value`` as a JAX array where ``like`` lives (its sharding), a typed key if ``like`` is one."""
    jax = _jax()
    sharding = getattr(like, "sharding", None)
    if is_typed_key(like):
        data = jax.device_put(value, sharding) if sharding is not None else value
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(like))
    if sharding is not None:
        return jax.device_put(value, sharding)
    return jax.numpy.asarray(value)


class TreeNode(Trackable):
    """A directory of a pytree: children by local name (a dict key, an index, an attribute),
    tracked as any ``Trackable`` tracks its children."""

    def add(self, names: list[str], leaf: Trackable) -> None:
        """Put ``leaf`` at the path ``names`` below this node, making directories on the way."""
        node: Trackable = self
        for name in names[:-1]:
            below = node._lookup_dependency(name)
            if not isinstance(below, TreeNode):
                below = node._track_trackable(TreeNode(), name)
            node = below
        if node._lookup_dependency(names[-1]) is not None:
            raise InvalidArgumentError(f"two leaves of one pytree are both named {'/'.join(names)!r}")
        node._track_trackable(leaf, names[-1])


class ArrayNode(LeafNode):
    """A single array (or key) given for a checkpoint, a node of its own (``w/.ATTRIBUTES/...``);
    ``value`` is it, restored once a restore went through."""

    def __init__(self, value: Any, path: str) -> None:
        self.value = value

        def put(new: Any) -> None:
            self.value = new

        super().__init__(lambda: self.value, put, path)


class SpreadLeafNode(_ByRegion, LeafNode):
    """A :class:`LeafNode` of an array spread over devices (see ``_ByRegion``)."""


class SpreadArrayNode(_ByRegion, ArrayNode):
    """An :class:`ArrayNode` of an array spread over devices (see ``_ByRegion``)."""


class PytreeNode(TreeNode):
    """A pytree of JAX arrays held for a checkpoint: ``value`` is the tree, with the restored
    leaves once a restore went through (a pytree cannot change in place)."""

    def __init__(self, tree: Any) -> None:
        super().__init__()
        jax = _jax()
        flat, self._treedef = jax.tree_util.tree_flatten_with_path(tree)
        self._leaves = [leaf for _, leaf in flat]
        for index, (path, _) in enumerate(flat):
            names = path_names(path)
            self.add(names, leaf_node(self._getter(index), self._putter(index), "/".join(names)))

    def _getter(self, index: int) -> Callable[[], Any]:
        return lambda: self._leaves[index]

    def _putter(self, index: int) -> Callable[[Any], None]:
        def put(value: Any) -> None:
            self._leaves[index] = value

        return put

    @property
    def value(self) -> Any:
        """The tree, its structure and container types as given (a NamedTuple stays one)."""
        return _jax().tree_util.tree_unflatten(self._treedef, self._leaves)


class NnxNode(Trackable):
    """A Flax NNX module or optimizer: its state's variables by path (``nnx.state``), restored
    into those variables, so the live object changes in place. The tree is read anew for each
    save and restore: a module may gain variables between them."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self._tree: TreeNode | None = None
        self._layout: list[tuple[Any, int]] = []  # (path, id(variable)) the tree was built for

    def __repr__(self) -> str:
        return f"<trackpoint.jax.NnxNode {type(self.obj).__name__}>"

    def _build(self) -> TreeNode:
        """The tree of the object's variables now: the one built before while they are the same
        variables at the same paths (a restore's bookkeeping stays on its nodes), else a new one."""
        from flax import nnx

        flat = list(nnx.to_flat_state(nnx.state(self.obj)))
        layout = [(path, id(variable)) for path, variable in flat]
        if self._tree is not None and layout == self._layout:
            return self._tree
        tree = TreeNode()
        for path, variable in flat:
            names = path_names(path)
            tree.add(names, leaf_node(variable.get_value, variable.set_value, "/".join(names)))
        self._tree, self._layout = tree, layout
        return tree

    def _trackable_children(self) -> dict[str, Trackable]:
        return self._build()._trackable_children()

    def _lookup_dependency(self, name: str) -> Trackable | None:
        tree = self._tree if self._tree is not None else self._build()
        return tree._lookup_dependency(name)


def is_nnx(value: Any) -> bool:
    """Whether ``value`` is a Flax NNX object (a module, an optimizer, ``nnx.Rngs``)."""
    return any(cls.__module__.startswith("flax.nnx") for cls in type(value).__mro__[:-1])
