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

from trackpoint._io import OBJECT_GRAPH_KEY, slices
from trackpoint._pipeline import wire
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
        meta: Per key: dtype name, shape (the full shape for a slice), the extents of each slice
            the rank holds or None for a whole tensor, and the bytes this rank holds of it.
        graph: A digest of the rank's object graph.
    """

    prefix: str
    keys: list[str]
    meta: list[list[Any]]
    graph: str

    def encode(self) -> bytes:
        return wire.to_json([self.prefix, self.keys, self.meta, self.graph])

    @classmethod
    def decode(cls, raw: bytes) -> Description:
        prefix, keys, meta, graph = wire.from_json(raw)
        return cls(prefix, keys, meta, graph)


def _meta(value: Any) -> list[Any]:
    held = slices.held_slices(value)
    if held is not None:  # every slice this rank holds (a SliceSet: any number, none included)
        dtype = np.dtype(value.dtype) if isinstance(value, slices.SliceSet) else np.asarray(value.value).dtype
        parts = [[list(e) for e in part.extents] for part in held]
        return [dtype.str, list(value.full_shape), parts, sum(np.asarray(p.value).nbytes for p in held)]
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
    held = "" if extents is None else f", slices {[[[s, s + n] for s, n in part] for part in extents]}"
    return f"{name}{shape}{held}"


def _mismatch(views: Sequence[Description], index: int) -> str:
    return "; ".join(_held(view, rank, index) for rank, view in enumerate(views))


def _held(view: Description, rank: int, index: int) -> str:
    """What rank ``rank`` saves as its tensor ``index``."""
    if index < len(view.keys):
        return f"rank {rank}: {view.keys[index]} ({_what(view.meta[index])})"
    return f"rank {rank}: nothing (it has {len(view.keys)} tensors)"


def _agree(a: list[Any], b: list[Any]) -> bool:
    """Whether two ranks' metas of one tensor can be saved together: dtype, shape (the full
    one for a slice) and slicing alike; the slices themselves differ by design."""
    return a[0] == b[0] and list(a[1]) == list(b[1]) and (a[2] is None) == (b[2] is None)


@dataclass(frozen=True)
class _Difference:
    """How one rank's view differs from rank 0's.

    Attributes:
        rank: The differing rank.
        kind: ``"path"``, ``"tensor"`` or ``"graph"``.
        text: The difference, naming rank 0's side and this rank's.
        key: The checkpoint key concerned (this rank's, else rank 0's), or None.
    """

    rank: int
    kind: str
    text: str
    key: str | None = None


def _difference(first: Description, view: Description, rank: int) -> _Difference | None:
    """Rank ``rank``'s first difference from rank 0: its path, else its first tensor (in save
    order) whose key, dtype, shape or slicing differs, else its object graph; None if none."""
    if view.prefix != first.prefix:
        return _Difference(rank, "path", f"rank 0 to {first.prefix}, rank {rank} to {view.prefix}")
    for index in range(max(len(first.keys), len(view.keys))):
        if (
            index >= len(first.keys)
            or index >= len(view.keys)
            or first.keys[index] != view.keys[index]
            or not _agree(first.meta[index], view.meta[index])
        ):
            key = view.keys[index] if index < len(view.keys) else first.keys[index]
            text = f"at tensor {index}: {_held(first, 0, index)}; {_held(view, rank, index)}"
            return _Difference(rank, "tensor", text, key)
    if view.graph != first.graph:
        return _Difference(rank, "graph", f"objects named or linked differently on rank 0 and rank {rank}")
    return None


_LISTED = 4  # other differing ranks a refusal names after the first (a job of thousands may all differ)


def _refusal(prefix: str, differences: Sequence[_Difference]) -> InvalidArgumentError:
    """The error naming ``differences[0]`` (the first in rank order), then a few others."""
    head = differences[0]
    if head.kind == "path":
        return InvalidArgumentError(
            f"the ranks save to different paths: {head.text}; every rank must save the same checkpoint (a "
            "numbered save needs the same save_counter everywhere)",
            path=prefix,
        )
    if head.kind == "tensor":
        text = (
            f"{prefix}: the ranks' objects differ, so nothing was saved; the first difference (the lowest rank, "
            f"then its first tensor in save order) is {head.text}"
        )
    else:
        text = f"{prefix}: the ranks' object graphs differ (the same tensors, but {head.text}), so nothing was saved"
    others = [f"rank {d.rank} ({d.text})" for d in differences[1:]]
    if others:
        more = len(others) - _LISTED
        text += f". Other ranks differ from rank 0 too: {', '.join(others[:_LISTED])}"
        text += f" and {more} more" if more > 0 else ""
    text += (
        ". Every rank must save the same objects (the same variables, of the same dtypes and shapes, "
        "attached under the same names)"
    )
    return InvalidArgumentError(text, path=prefix, key=head.key)


def decide(views: Sequence[Description], io_rank: int | None) -> np.ndarray:
    """The owner of each key (a rank, or :data:`SHARDED`), or an error naming what disagrees.

    The ranks are compared with rank 0 in rank order; the error names the first difference
    in that order: the lowest rank that differs, at its path if it saves elsewhere, else at
    its first tensor in save order (the order of the keys each rank describes) whose key,
    dtype, shape or slicing differs, else at its object graph. Every other differing rank
    follows, each at its own first difference (the first few of them).

    Raises:
        InvalidArgumentError: The ranks save to different prefixes, hold different objects,
            or slices that do not tile their tensor; nothing has been written.
    """
    first = views[0]
    differences = [d for rank, view in enumerate(views[1:], 1) if (d := _difference(first, view, rank))]
    if differences:
        raise _refusal(first.prefix, differences)
    count = len(first.keys)
    loads = [0] * len(views)
    owners = np.zeros(count, dtype=np.int32)
    replicated = []
    for index in range(count):
        metas = [view.meta[index] for view in views]  # alike on every rank but for the slices held
        if metas[0][2] is not None:
            if metas[0][0] in ("bytes", "|O"):
                raise InvalidArgumentError(
                    f"{first.prefix}: {first.keys[index]} is a string tensor held in slices; save strings whole",
                    key=first.keys[index],
                )
            problem = slices.cover_problem(tuple(metas[0][1]), [tuple(map(tuple, e)) for m in metas for e in m[2]])
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
