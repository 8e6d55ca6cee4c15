"""``trackpoint.jax.restore``: a checkpoint into the structure of a target pytree, strict by default."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import trackpoint as tp
from trackpoint._io import BundleReader
from trackpoint.errors import InvalidArgumentError
from trackpoint.jax._nodes import PRNG_IMPL, path_names, place
from trackpoint.jax._shards import array_from_regions, spreads
from trackpoint.protocol import VARIABLE_VALUE

__all__ = ["RestoreReport", "restore"]


@dataclass(frozen=True)
class RestoreReport:
    """What :func:`restore` matched and could not.

    Attributes:
        restored: Leaf path (``params/dense/kernel``) -> the checkpoint key it was read from.
        missing: Leaves of the target the checkpoint has no value for.
        unexpected: Paths of checkpoint values the target has no leaf for (``save_counter`` aside).
        mismatched: ``"<leaf>: <target> wanted, <stored> in the checkpoint"``.
    """

    restored: Mapping[str, str]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    mismatched: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)


def restore(path: str, target: Any, strict: bool = True, *, storage_options: Mapping[str, Any] | None = None) -> Any:
    """Read the checkpoint at ``path`` into a pytree shaped like ``target``.

    ``target`` holds arrays or ``jax.ShapeDtypeStruct``\\ s (with ``sharding=`` where the result
    should live); its key paths name the checkpoint's values (a ``trackpoint.jax.Checkpoint(
    params=...)`` file: ``{"params": ...}``). The result has the target's structure and container
    types (a NamedTuple stays one, a tuple a tuple); typed PRNG keys come back keys of their
    implementation. Every value is read and its checksum verified before the result is built.

    Args:
        path: A checkpoint prefix, a directory with a ``checkpoint`` file, or a URL.
        target: The pytree to fill.
        strict: Raise when a leaf is missing, a value unexpected, or a dtype or shape differs
            (naming every one); nothing half-filled is returned.
        storage_options: For a URL, options of its fsspec filesystem.

    Returns:
        The restored pytree; with ``strict=False``, ``(tree, RestoreReport)``, where a leaf the
        checkpoint lacks or mismatches keeps the target's (an array, or its ShapeDtypeStruct).

    Raises:
        InvalidArgumentError: With ``strict``, the target and the checkpoint differ.
        NotFoundError: Nothing at ``path``.
        DataLossError: A value is damaged, naming the file and key.

    Examples:
        >>> import tempfile
        >>> import jax, jax.numpy as jnp
        >>> import trackpoint.jax as tpj
        >>> path = tpj.Checkpoint(params={"w": jnp.ones(2), "step": jnp.int32(3)}).save(tempfile.mkdtemp() + "/c")
        >>> target = {"params": {"w": jax.ShapeDtypeStruct((2,), jnp.float32), "step": jax.ShapeDtypeStruct((), jnp.int32)}}
        >>> restored = tpj.restore(path, target)["params"]
        >>> restored["w"].tolist(), int(restored["step"])
        ([1.0, 1.0], 3)
    """
    import jax

    flat, treedef = jax.tree_util.tree_flatten_with_path(target)
    keys: dict[int, tuple[str, str | None]] = {}  # leaf index -> (value key, PRNG impl key)
    missing: list[str] = []
    mismatched: list[str] = []
    with tp.CheckpointView(path, storage_options=storage_options) as view:
        claimed: set[int] = set()
        children: dict[int, dict[str, int]] = {}
        for index, (key_path, leaf) in enumerate(flat):
            names = path_names(key_path)
            node = _find(view, names, children)
            attributes = view.attributes(node) if node is not None else {}
            key = attributes.get(VARIABLE_VALUE)
            if node is None or key is None:
                missing.append("/".join(names))
                continue
            claimed.add(node)
            why = _mismatch(leaf, view.describe(key), PRNG_IMPL in attributes)
            if why is not None:
                mismatched.append(f"{'/'.join(names)}: {why}")
                continue
            keys[index] = (key, attributes.get(PRNG_IMPL))
        unexpected = _unclaimed(view, claimed)
        resolved = view.prefix
    if strict and (missing or unexpected or mismatched):
        lines = [f"{resolved}: the target and the checkpoint differ; nothing was restored"]
        lines += [f"missing from the checkpoint: {', '.join(missing)}"] if missing else []
        lines += [f"in the checkpoint but not the target: {', '.join(unexpected)}"] if unexpected else []
        lines += mismatched
        lines.append("give a target of the saved structure, or pass strict=False for what matches")
        raise InvalidArgumentError("\n".join(lines), path=resolved)
    leaves = [leaf for _, leaf in flat]
    with BundleReader(resolved) as bundle:  # every value read and verified before any is placed
        read: dict[int, tuple[Any, Any]] = {}
        spread: dict[int, Any] = {}
        for i, (k, impl) in keys.items():
            leaf = flat[i][1]
            if _key_impl(leaf) is None and spreads(getattr(leaf, "sharding", None)):
                # Each device's part alone, from the stored slices that overlap it.
                shape = tuple(leaf.shape)
                spread[i] = array_from_regions(shape, leaf.sharding, functools.partial(bundle.read_region, k))
            else:
                read[i] = (_read(bundle, k, leaf), bundle.read(impl) if impl else None)
    for index, (value, impl) in read.items():
        leaves[index] = _place(np.asarray(value), flat[index][1], impl, resolved)
    for index, array in spread.items():
        leaves[index] = array
    tree = jax.tree_util.tree_unflatten(treedef, leaves)
    if strict:
        return tree
    report = RestoreReport(
        restored={"/".join(path_names(flat[i][0])): k for i, (k, _) in keys.items()},
        missing=tuple(missing),
        unexpected=tuple(unexpected),
        mismatched=tuple(mismatched),
    )
    return tree, report


def _read(bundle: BundleReader, key: str, leaf: Any) -> Any:
    """The value of ``key``, read into 64-byte-aligned memory of its own when it is a plain array:
    JAX then takes that memory as it is on the CPU (no second copy, see :func:`_place`)."""
    if _key_impl(leaf) is not None or np.dtype(leaf.dtype).kind not in "biufc":
        return bundle.read(key)
    dtype = np.dtype(leaf.dtype)
    size = int(np.prod(leaf.shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start : start + size].view(dtype).reshape(leaf.shape)
    return bundle.read(key, out)


def _find(view: tp.CheckpointView, names: list[str], children: dict[int, dict[str, int]]) -> int | None:
    """The node at ``names`` from the root; ``children`` caches each node's (a pytree of thousands
    of leaves under one node would otherwise build that node's dict once per leaf)."""
    node: int | None = 0
    for name in names:
        if node is None:
            return None
        found = children.get(node)
        if found is None:
            found = children[node] = view.children(node)
        node = found.get(name)
    return node


def _key_impl(leaf: Any) -> str | None:
    """The PRNG implementation of a typed-key leaf (an array or a ShapeDtypeStruct), else None."""
    import jax

    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    impl = getattr(dtype, "_impl", None)  # KeyTy's; a key array answers jax.random.key_impl the same
    return str(getattr(impl, "name", impl))


def _mismatch(leaf: Any, stored: tuple[str, list[int], int], holds_impl: bool) -> str | None:
    dtype, shape, _ = stored
    impl = _key_impl(leaf)
    if impl is not None:
        if not holds_impl:
            return f"a {impl} PRNG key wanted, plain {dtype}{shape} data in the checkpoint"
        if dtype != "uint32" or tuple(shape[: len(leaf.shape)]) != tuple(leaf.shape):
            return f"a {impl} key of shape {list(leaf.shape)} wanted, {dtype}{shape} key data in the checkpoint"
        return None
    wanted = f"{np.dtype(leaf.dtype).name}{list(leaf.shape)}"
    return None if wanted == f"{dtype}{shape}" else f"{wanted} wanted, {dtype}{shape} in the checkpoint"


def _place(value: np.ndarray, leaf: Any, impl_key: Any, prefix: str) -> Any:
    import jax

    impl = _key_impl(leaf)
    if impl is not None:
        stored = bytes(impl_key).decode() if impl_key is not None else ""
        if stored != impl:
            raise InvalidArgumentError(f"{prefix}: a {impl} PRNG key wanted, {stored or 'plain'} key data stored")
        key = jax.random.wrap_key_data(jax.numpy.asarray(value), impl=impl)
        sharding = getattr(leaf, "sharding", None)
        return jax.device_put(key, sharding) if sharding is not None else key
    sharding = getattr(leaf, "sharding", None)
    if sharding is not None:
        return jax.device_put(value, sharding)
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return jax.device_put(value)  # aligned host memory (see _read): taken as it is on the CPU
    return place(value, leaf)


def _unclaimed(view: tp.CheckpointView, claimed: set[int]) -> list[str]:
    """Checkpoint paths of the values no leaf asked for (the root's ``save_counter`` is bookkeeping)."""
    below = view.values_below(0, skip={"save_counter"})
    return sorted(key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE") for node, key in below.items() if node not in claimed)
