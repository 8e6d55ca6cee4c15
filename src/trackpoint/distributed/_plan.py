"""Deciding who writes what in a save of several processes: the data of the plan, no I/O.

Every rank describes its tensors (key, dtype, shape, the slice it holds, bytes); one rank
checks that the descriptions agree and decides. A tensor every rank holds whole is
*replicated* and written once, by the rank that has the fewest bytes to write so far
(largest tensors first); a tensor the ranks hold in slices is *sharded* and each slice is
written by its holder, once the slices are known to tile it exactly.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackpoint._format import slices
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint.distributed import _wire
from trackpoint.errors import InvalidArgumentError

__all__ = ["SHARDED", "Description", "decide", "describe"]

#: The owner of a sharded tensor: every rank writes the slice it holds.
SHARDED = -1


@dataclass(frozen=True)
class Description:
    """One rank's view of a save, as the deciding rank receives it.

    Attributes:
        prefix: Where the rank saves.
        keys: The checkpoint keys, in write order.
        meta: Per key: dtype name, shape (the full shape for a slice), the slice's extents or
            None for a whole tensor, and the bytes this rank holds of it.
        graph: A digest of the rank's object graph.
    """

    prefix: str
    keys: list[str]
    meta: list[list[Any]]
    graph: str

    def encode(self) -> bytes:
        return _wire.to_json([self.prefix, self.keys, self.meta, self.graph])

    @classmethod
    def decode(cls, raw: bytes) -> Description:
        prefix, keys, meta, graph = _wire.from_json(raw)
        return cls(prefix, keys, meta, graph)


def _meta(value: Any) -> list[Any]:
    if isinstance(value, slices.SlicedValue):
        array = np.asarray(value.value)
        return [array.dtype.str, list(value.full_shape), [list(e) for e in value.extents], array.nbytes]
    if isinstance(value, bytes):
        return ["bytes", [], None, len(value)]
    array = np.asarray(value)
    return [array.dtype.str, list(array.shape), None, array.nbytes if array.dtype != object else array.size * 16]


def describe(prefix: str, tensors: Sequence[tuple[str, Any]]) -> Description:
    """This rank's :class:`Description` of ``tensors`` (the object graph among them)."""
    keys: list[str] = []
    meta: list[list[Any]] = []
    graph = ""
    for key, value in tensors:
        keys.append(key)
        if key == OBJECT_GRAPH_KEY:
            graph = hashlib.sha256(value).hexdigest()
            meta.append(["bytes", [], None, len(value)])
        else:
            meta.append(_meta(value))
    return Description(prefix, keys, meta, graph)


def _what(meta: list[Any]) -> str:
    dtype, shape, extents, _ = meta
    name = "string" if dtype in ("bytes", "|O") else np.dtype(dtype).name
    held = "" if extents is None else f", slice {[[s, s + n] for s, n in extents]}"
    return f"{name}{shape}{held}"


def _mismatch(views: Sequence[Description], index: int) -> str:
    parts = []
    for rank, view in enumerate(views):
        if index < len(view.keys):
            parts.append(f"rank {rank}: {view.keys[index]} ({_what(view.meta[index])})")
        else:
            parts.append(f"rank {rank}: nothing (it has {len(view.keys)} tensors)")
    return "; ".join(parts)


def decide(views: Sequence[Description], io_rank: int | None) -> np.ndarray:
    """The owner of each key (a rank, or :data:`SHARDED`), or an error naming what disagrees.

    Raises:
        InvalidArgumentError: The ranks save to different prefixes, hold different objects
            (named at the first differing tensor on every rank), or slices that do not tile
            their tensor; nothing has been written.
    """
    first = views[0]
    for rank, view in enumerate(views):
        if view.prefix != first.prefix:
            raise InvalidArgumentError(
                f"the ranks save to different paths: rank 0 to {first.prefix}, rank {rank} to {view.prefix}; every "
                "rank must save the same checkpoint (a numbered save needs the same save_counter everywhere)",
                path=first.prefix,
            )
    count = len(first.keys)
    for rank, view in enumerate(views[1:], 1):
        if view.keys != first.keys:
            index = next(
                (i for i, (a, b) in enumerate(zip(first.keys, view.keys)) if a != b), min(count, len(view.keys))
            )
            raise InvalidArgumentError(
                f"{first.prefix}: the ranks' objects differ, so nothing was saved; at tensor {index}: "
                f"{_mismatch(views, index)}",
                path=first.prefix,
                key=first.keys[index] if index < count else None,
            )
        if view.graph != first.graph:
            raise InvalidArgumentError(
                f"{first.prefix}: the ranks' object graphs differ (the same tensors, but objects named or linked "
                f"differently on rank 0 and rank {rank}), so nothing was saved",
                path=first.prefix,
            )
    loads = [0] * len(views)
    owners = np.zeros(count, dtype=np.int32)
    replicated = []
    for index in range(count):
        metas = [view.meta[index] for view in views]
        dtypes = {m[0] for m in metas}
        shapes = {tuple(m[1]) for m in metas}
        sliced = [m[2] is not None for m in metas]
        if len(dtypes) > 1 or len(shapes) > 1 or (any(sliced) and not all(sliced)):
            raise InvalidArgumentError(
                f"{first.prefix}: the ranks' objects differ, so nothing was saved; at tensor {index}: "
                f"{_mismatch(views, index)}",
                path=first.prefix,
                key=first.keys[index],
            )
        if all(sliced):
            if dtypes & {"bytes", "|O"}:
                raise InvalidArgumentError(
                    f"{first.prefix}: {first.keys[index]} is a string tensor held in slices; save strings whole",
                    key=first.keys[index],
                )
            problem = slices.cover_problem(tuple(metas[0][1]), [tuple(map(tuple, m[2])) for m in metas])
            if problem is not None:
                raise InvalidArgumentError(
                    f"{first.prefix}: {first.keys[index]} of shape {metas[0][1]} is held in slices by the ranks, and "
                    f"{problem}; nothing was saved. Each element must be held by exactly one rank "
                    f"({_mismatch(views, index)})",
                    path=first.prefix,
                    key=first.keys[index],
                )
            owners[index] = SHARDED
            for rank, meta in enumerate(metas):
                loads[rank] += int(meta[3])
        else:
            replicated.append((-int(metas[0][3]), index))
    if io_rank is not None:
        for _, index in replicated:
            owners[index] = io_rank
        return owners
    heap = [(load, rank) for rank, load in enumerate(loads)]
    heapq.heapify(heap)
    for negative_size, index in sorted(replicated):  # largest first: the greedy balance is then within 4/3
        load, rank = heapq.heappop(heap)
        owners[index] = rank
        heapq.heappush(heap, (load - negative_size, rank))
    return owners
