"""Sharded JAX arrays as TF slices: each shard written once, each device's part read alone.

A save offers an array spread over several devices (and processes) as the slices its shards
are (of the dtypes TensorFlow reads in slices, :data:`TF_SLICEABLE`): one per distinct shard, the replicas of a shard taking turns to write it (the n-th
distinct shard by the n-th of its replicas, modulo their number), so that the writes spread
over the devices and, under ``jax.distributed``, over the processes. Each process offers the
shards that fall to its own devices; together the processes tile the array, and the save of
several processes (:mod:`trackpoint.distributed`) checks that they do. The shards' memory is
offered as it is (a NumPy view of a CPU buffer): nothing is gathered or copied.

A restore reads, for each device of this process, only the stored slices that overlap its
part of the array (``read_region``), whatever mesh or device count saved it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trackpoint._io import slices

__all__ = ["Bounds", "array_from_regions", "is_spread", "own_box", "saved_value", "spreads", "writers"]

#: The dtypes TensorFlow 2.21 assembles from slices (its copy routine's; float16, uint16, uint32 and
#: uint64 raise "Dtype ... not supported"). An array of another dtype that this process holds
#: whole is saved whole (gathered); one spread over processes is saved in slices all the same,
#: which trackpoint reads and TensorFlow does not.
TF_SLICEABLE = frozenset(
    ["float32", "float64", "int32", "uint8", "int16", "int8", "complex64", "complex128", "int64", "bool", "bfloat16"]
)

#: ``(start, stop)`` per dimension.
Bounds = tuple[tuple[int, int], ...]


def is_spread(value: Any) -> bool:
    """Whether ``value`` is a JAX array whose devices hold different parts of it (not one device,
    not replicas of the whole): what a save writes as slices and a restore reads by region."""
    import jax

    return isinstance(value, jax.Array) and spreads(value.sharding)


def spreads(sharding: Any) -> bool:
    """Whether ``sharding`` gives its devices different parts of an array (see :func:`is_spread`)."""
    return sharding is not None and len(sharding.device_set) > 1 and not sharding.is_fully_replicated


def _bounds(index: tuple[slice, ...], shape: tuple[int, ...]) -> Bounds:
    out = []
    for part, size in zip(index, shape):
        start, stop, _ = part.indices(size)
        out.append((start, stop))
    return tuple(out)


def saved_value(array: Any) -> Any:
    """What a save stores for the JAX array ``array``: a NumPy view of it when one device holds it
    whole (or every device does), else a :class:`~trackpoint._io.slices.SliceSet` of the shards
    this process writes (see the module docstring)."""
    if not is_spread(array):
        shards = array.addressable_shards
        if len(shards) > 1:  # replicas: one of them, not a gathered copy
            return np.asarray(shards[0].data)
        return np.asarray(array)
    if np.dtype(array.dtype).name not in TF_SLICEABLE and array.is_fully_addressable:
        return np.asarray(array)  # gathered: TensorFlow could not read it in slices
    shape = tuple(array.shape)
    writer = writers(array.sharding, shape)
    parts = []
    for shard in array.addressable_shards:
        bounds = _bounds(shard.index, shape)
        if writer[bounds] == shard.device:
            extents = tuple((start, stop - start) for start, stop in bounds)
            parts.append(slices.SlicedValue(np.asarray(shard.data), shape, extents))
    return slices.SliceSet(tuple(parts), shape, np.dtype(array.dtype))


def writers(sharding: Any, shape: tuple[int, ...]) -> dict[Bounds, Any]:
    """The device that writes each distinct part of a ``shape`` array on ``sharding``: the n-th
    part (in the order of its bounds, the same in every process) by the n-th of its replicas
    (by device id), modulo their number."""
    replicas: dict[Bounds, list[Any]] = {}
    for device, index in sharding.devices_indices_map(shape).items():
        replicas.setdefault(_bounds(index, shape), []).append(device)
    chosen = {}
    for ordinal, bounds in enumerate(sorted(replicas)):
        devices = sorted(replicas[bounds], key=lambda d: d.id)
        chosen[bounds] = devices[ordinal % len(devices)]
    return chosen


def own_box(sharding: Any, shape: tuple[int, ...]) -> Bounds:
    """The smallest box holding every part of a ``shape`` array that this process's devices hold."""
    boxes = [_bounds(index, shape) for index in sharding.addressable_devices_indices_map(shape).values()]
    return tuple((min(b[d][0] for b in boxes), max(b[d][1] for b in boxes)) for d in range(len(shape)))


def array_from_regions(shape: tuple[int, ...], sharding: Any, read: Callable[[Bounds], np.ndarray]) -> Any:
    """The JAX array of ``shape`` on ``sharding`` whose every addressable device's part is
    ``read(bounds)``; each distinct part is read once, however many replicas hold it."""
    import jax

    read_once: dict[Bounds, np.ndarray] = {}

    def part(index: tuple[slice, ...] | None) -> np.ndarray:
        bounds = _bounds(index or (), shape)
        value = read_once.get(bounds)
        if value is None:
            value = read_once[bounds] = read(bounds)
        return value

    return jax.make_array_from_callback(shape, sharding, part)
