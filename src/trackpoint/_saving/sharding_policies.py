"""How a checkpoint's tensors are split into shard files: the callback interface and TF's policies."""

from __future__ import annotations

import abc
import math
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trackpoint._format import slices
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint._saving.device_spec import DeviceSpec
from trackpoint.errors import InvalidArgumentError, ShardingCallbackError

__all__ = ["MaxShardSizePolicy", "Shard", "ShardByTaskPolicy", "ShardableTensor", "ShardingCallback", "validate_shards"]

Shard = MutableMapping[str, MutableMapping[str, Any]]
LOCAL_DEVICE = DeviceSpec(job="localhost", replica=0, task=0, device_type="CPU", device_index=0)


@dataclass(frozen=True, eq=False)
class ShardableTensor:
    """One tensor offered to a sharding callback (TF's fields, numpy values).

    Attributes:
        tensor: The value: a numpy array, or ``bytes`` for a scalar string.
        dtype: Its numpy dtype (``object`` for strings).
        device: Where it lives; always the local CPU in one process.
        name: The save name, which is the checkpoint key.
        shape: Its shape.
        slice_spec: ``""``, or a spec such as ``"10 4 0,4:0,4"`` if already a slice.
        checkpoint_key: The key it is saved under.
        trackable: The object it belongs to (None for the object graph).
    """

    tensor: Any
    dtype: np.dtype
    device: DeviceSpec
    name: str
    shape: tuple[int, ...]
    slice_spec: str
    checkpoint_key: str
    trackable: Any = field(default=None, repr=False)

    def __hash__(self) -> int:
        return hash((self.name, str(self.dtype), str(self.device), self.checkpoint_key))

    def __eq__(self, other: object) -> bool:
        return self is other


class ShardingCallback(abc.ABC):
    """Decides which tensors (or slices of them) go to which shard file.

    ``__call__`` receives every :class:`ShardableTensor` of the checkpoint and returns a list
    of shards, each ``{checkpoint_key: {slice_spec: tensor}}``; shard ``i`` becomes
    ``<prefix>.data-<i>-of-<n>``. The output is checked: no tensor dropped or added, no
    dtype or shape changed, no key/slice twice, slices tiling each tensor exactly.

    Examples:
        >>> import trackpoint as tp
        >>> class OnePerTensor(tp.sharding.ShardingCallback):
        ...     @property
        ...     def description(self):
        ...         return "one shard per tensor"
        ...     def __call__(self, shardable_tensors):
        ...         return [{t.checkpoint_key: {t.slice_spec: t.tensor}} for t in shardable_tensors]
        >>> OnePerTensor().description
        'one shard per tensor'
    """

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """A human-readable description of the policy."""

    @abc.abstractmethod
    def __call__(self, shardable_tensors: Sequence[ShardableTensor]) -> Sequence[Shard]:
        """Split the tensors into shards."""

    def __hash__(self) -> int:
        return hash((self.description, tuple(sorted((k, repr(v)) for k, v in vars(self).items()))))


class ShardByTaskPolicy(ShardingCallback):
    """One shard for everything (one per task, and a process is one task): TF's default.

    Examples:
        >>> import trackpoint as tp
        >>> tp.sharding.ShardByTaskPolicy().description
        'Split tensors into shards based on the task they belong to.'
    """

    @property
    def description(self) -> str:
        return "Split tensors into shards based on the task they belong to."

    def __call__(self, shardable_tensors: Sequence[ShardableTensor]) -> Sequence[Shard]:
        shard: Shard = {}
        for t in shardable_tensors:
            shard.setdefault(t.checkpoint_key, {})[t.slice_spec] = t.tensor
        return [shard]


def _string_sizes(value: Any) -> list[int]:
    if isinstance(value, bytes):
        return [len(value)]
    return [len(x) for x in np.asarray(value, dtype=object).reshape(-1)]


@dataclass(frozen=True)
class _Region:
    """The part of a tensor a ``ShardableTensor`` holds: all of it, or the slice it already is.

    Attributes:
        full_shape: The whole tensor's shape.
        offset: Where the held part starts in it.
        shape: The held part's shape (its value's shape).
    """

    full_shape: tuple[int, ...]
    offset: list[int]
    shape: list[int]

    def index(self, offset: list[int], shape: list[int]) -> tuple[slice, ...]:
        """The slice of the held value at ``offset`` (in the whole tensor) of ``shape``."""
        return tuple(slice(o - r, o - r + s) for o, r, s in zip(offset, self.offset, shape))

    def rest(self, offset: list[int]) -> list[int]:
        """The shape of what is left of the held part from ``offset`` on."""
        return [s - (o - r) for s, o, r in zip(self.shape, offset, self.offset)]


class _Partitioner:
    """TF's ``MaxShardSizePartitioner``, over numpy arrays (see :class:`MaxShardSizePolicy`)."""

    def __init__(self, max_shard_size: int) -> None:
        self.max = max_shard_size
        self.shards: list[Shard] = [{}]
        self.large: list[Shard] = []
        self.remaining = max_shard_size

    def _new_shard(self) -> None:
        self.shards.append({})
        self.remaining = self.max

    def _put(self, key: str, spec: str, value: Any, size: int) -> None:
        self.shards[-1].setdefault(key, {})[spec] = value
        self.remaining -= size

    def _next_partition(self, shape: list[int], elem: int) -> tuple[int, int]:
        """The axis and part length whose slices fill the remaining space with fewest parts."""
        n = math.prod(shape)

        def parts(axis: int) -> float:
            per_shard = self.remaining // (n // shape[axis] * elem)
            return math.inf if per_shard == 0 else math.ceil(shape[axis] / per_shard)

        best_axis, best = 0, parts(0)
        for axis in range(1, len(shape)):
            count = parts(axis)
            if count < best and n * elem / count <= self.remaining:
                best_axis, best = axis, count
        return best_axis, (0 if best == math.inf else math.ceil(shape[best_axis] / best))

    def add(self, t: ShardableTensor) -> None:
        key, value = t.checkpoint_key, t.tensor
        if t.slice_spec:
            full_shape, extents = slices.parse_spec(t.slice_spec)
            root_offset = [start for start, _ in extents]
            root_shape = [full_shape[i] if length == -1 else length for i, (_, length) in enumerate(extents)]
        else:
            full_shape, root_offset, root_shape = tuple(t.shape), [0] * len(t.shape), list(t.shape)
        if key == OBJECT_GRAPH_KEY:
            elem = total = 0  # TF leaves the graph out of the size budget
        elif t.dtype == np.dtype(object):
            total = elem = sum(_string_sizes(value))
        else:
            elem = t.dtype.itemsize
            total = math.prod(root_shape) * elem
        # String tensors are never sliced: TF cannot read sliced strings back ("Dtype string not
        # supported" in RestoreV2), so a string tensor is placed whole, like a scalar.
        if not root_shape or t.dtype == np.dtype(object):
            self._add_whole(key, t.slice_spec, value, total)
        else:
            self._add_sliced(key, value, _Region(full_shape, root_offset, root_shape), elem)

    def _add_whole(self, key: str, spec: str, value: Any, total: int) -> None:
        """Place a tensor that is never cut: in the current shard, a new one, or one of its own."""
        if total > self.max:
            self.large.append({key: {spec: value}})
            return
        if total > self.remaining:
            self._new_shard()
        self._put(key, spec, value, total)

    def _add_sliced(self, key: str, value: Any, region: _Region, elem: int) -> None:
        """Cut ``value`` (the tensor's ``region``) into slices that fill the shards in turn."""
        offset = list(region.offset)
        shape = list(region.shape)
        size = math.prod(shape) * elem
        while size > self.remaining:
            axis, part = self._next_partition(shape, elem)
            if part == 0:
                if self.remaining < self.max:
                    self._new_shard()
                    continue
                # Not even one slice fits in an empty shard. TF loops here forever; we give
                # the thinnest slice a shard of its own, as it does for oversized scalars.
                axis = min(range(len(shape)), key=lambda a: math.prod(shape) // shape[a])
                part = 1
            part_shape = list(shape)
            part_shape[axis] = part
            self._add_part(key, value, region, offset, part_shape, elem)
            offset[axis] += part
            shape = region.rest(offset)
            size = math.prod(shape) * elem
        if math.prod(shape) > 0 or math.prod(region.shape) == 0:
            # Unlike TF, an empty tensor is kept (TF silently drops it from the checkpoint).
            spec = slices.format_spec(region.full_shape, tuple(zip(offset, shape)))
            whole = offset == region.offset and shape == region.shape
            self._put(key, spec, value if whole else value[region.index(offset, shape)], size)

    def _add_part(
        self, key: str, value: Any, region: _Region, offset: list[int], part_shape: list[int], elem: int
    ) -> None:
        """Place one slice cut off the tensor: in the current shard, or one of its own if too large."""
        part_bytes = math.prod(part_shape) * elem
        spec = slices.format_spec(region.full_shape, tuple(zip(offset, part_shape)))
        part = value[region.index(offset, part_shape)]
        if part_bytes > self.max:
            self.large.append({key: {spec: part}})
            return
        self._put(key, spec, part, part_bytes)
        if self.remaining == 0:
            self._new_shard()

    def result(self) -> list[Shard]:
        return (self.shards if self.shards[0] else []) + self.large


class MaxShardSizePolicy(ShardingCallback):
    """Split tensors into shards of at most ``max_shard_size`` bytes, as TF 2.21 does.

    Tensors are taken in order; one that does not fit the current shard is cut into slices
    along the axis that needs the fewest parts (axis 0 unless another is strictly better).
    A scalar, or a slice, larger than the limit gets a shard of its own, and the object graph
    does not count. Three deliberate differences, each where TF loses data: string tensors are
    placed whole like scalars (TF slices them, then cannot restore the slices); where no slice
    fits even an empty shard, the thinnest slice gets a shard of its own (TF loops forever);
    an empty tensor is kept (TF silently leaves it out of the checkpoint).

    Examples:
        >>> import trackpoint as tp
        >>> tp.sharding.MaxShardSizePolicy(max_shard_size=1 << 20).max_shard_size
        1048576
    """

    def __init__(self, max_shard_size: int) -> None:
        if not isinstance(max_shard_size, int) or max_shard_size <= 0:
            raise InvalidArgumentError(f"max_shard_size must be a positive number of bytes, got {max_shard_size!r}")
        self.max_shard_size = max_shard_size

    @property
    def description(self) -> str:
        return "Split tensors into shards with a max shard size."

    def __call__(self, shardable_tensors: Sequence[ShardableTensor]) -> Sequence[Shard]:
        partitioner = _Partitioner(self.max_shard_size)
        for t in shardable_tensors:
            partitioner.add(t)
        return partitioner.result()


def validate_shards(shards: Any, tensors: Sequence[ShardableTensor], description: str) -> list[Shard]:
    """Check a callback's output against its input; return the non-empty shards.

    Raises:
        ShardingCallbackError: Naming the key (and the callback) when a tensor is dropped or
            added, changes dtype or shape, appears twice, or its slices do not tile it.
    """
    where = f"sharding callback ({description})"
    if not isinstance(shards, Sequence) or isinstance(shards, (str, bytes)):
        raise ShardingCallbackError(f"{where} must return a list of shards, got {type(shards).__name__}")
    by_key: dict[str, list[ShardableTensor]] = {}  # a key held in several slices is offered once per slice
    for t in tensors:
        by_key.setdefault(t.checkpoint_key, []).append(t)
    seen: dict[str, list[tuple[tuple[int, int], ...]]] = {}
    for shard in shards:
        if not isinstance(shard, MutableMapping):
            raise ShardingCallbackError(f"{where} returned a shard of type {type(shard).__name__}, not a dict")
        for key, parts in shard.items():
            originals = by_key.get(key)
            if originals is None:
                raise ShardingCallbackError(f"{where} added {key!r}, a tensor not originally in the object graph")
            if not isinstance(parts, MutableMapping):
                raise ShardingCallbackError(f"{where}: {key!r} must map slice specs to tensors")
            for spec, value in parts.items():
                original = next((t for t in originals if t.slice_spec == spec), originals[0])
                _check_part(where, original, spec, value, seen.setdefault(key, []))
    for key, held in by_key.items():
        boxes = seen.get(key)
        if boxes is None:
            raise ShardingCallbackError(
                f"{where} dropped {key!r}: tensors in the object graph were not found in the checkpoint shards"
            )
        if sum(slices.volume(b) for b in boxes) != sum(math.prod(t.shape) for t in held):
            raise ShardingCallbackError(f"{where}: the slices of {key!r} do not cover it exactly once")
    return [shard for shard in shards if shard]


def _check_part(
    where: str, original: ShardableTensor, spec: str, value: Any, boxes: list[tuple[tuple[int, int], ...]]
) -> None:
    key = original.checkpoint_key
    # Bounds in the whole tensor's coordinates, so that the slices of a key held in several compare.
    whole = slices.parse_spec(original.slice_spec)[0] if original.slice_spec else tuple(original.shape)
    if spec == "":
        spec = original.slice_spec  # the original as it is
    if spec == "":
        bounds = tuple((0, d) for d in original.shape)
    else:
        full_shape, extents = slices.parse_spec(spec)
        if full_shape != whole:
            raise ShardingCallbackError(
                f"{where}: slice {spec!r} of {key!r} changes its shape {list(whole)}: "
                "a tensor was found with an altered shape"
            )
        bounds = slices.resolve(extents, full_shape, key)
    expected_shape = tuple(stop - start for start, stop in bounds)
    is_string = original.dtype == np.dtype(object)
    value_dtype = np.dtype(object) if isinstance(value, bytes) else np.asarray(value).dtype
    if value_dtype != original.dtype and not (is_string and value_dtype.kind in "OS"):
        raise ShardingCallbackError(
            f"{where} changed the dtype of {key!r} from {original.dtype} to {value_dtype}: "
            "a tensor was found with an altered dtype"
        )
    if np.shape(value) != expected_shape:
        raise ShardingCallbackError(
            f"{where}: {key!r} slice {spec!r} holds shape {list(np.shape(value))}, "
            f"expected {list(expected_shape)}: a tensor was found with an altered shape"
        )
    for other in boxes:
        if bounds == other:
            raise ShardingCallbackError(
                f"{where} put overlapping or repeated slices of {key!r} ({spec!r}): multiple "
                "tensors with the same checkpoint key and slice spec were found"
            )
        if all(a < d and c < b for (a, b), (c, d) in zip(bounds, other)):
            raise ShardingCallbackError(f"{where} put overlapping or repeated slices of {key!r} ({spec!r})")
    boxes.append(bounds)
