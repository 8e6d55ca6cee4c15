"""The statistics of many small tensors at once (``trackpoint report``).

A checkpoint may hold tens of thousands of tensors of a few KiB (biases, norms, the slots of
each): gathered one by one through :class:`~._report_stats.TensorStats`, each would cost some
fifty numpy calls, tens of microseconds, where reading its bytes costs one. Here a batch of them
is laid end to end in one float64 array and every statistic is a segmented reduction
(``ufunc.reduceat``) over it, or one ``bincount`` for all the histograms, so the cost is a few
numpy calls per batch plus a pass per statistic over its elements.

The results are those of :class:`~._report_stats.TensorStats` for the same values: the same
histogram grid (:func:`~._report_stats.fitting_scale`), the same sample, the same
counts; means and spreads summed in float64.

Examples:
    >>> import numpy as np
    >>> first, second = batch_stats([np.array([0.0, 1.0, 2.0, 3.0]), np.array([5, 5], np.int32)])
    >>> first["mean"], first["zeros"], second["std"], sum(second["hist"]["counts"])
    (1.5, 0.25, 0.0, 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from trackpoint.tools._report_stats import BINS, TensorStats, change_result, fitting_scale, sample_step

__all__ = ["batch_changes", "batch_stats"]


def _flat(values: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values end to end as float64, each one's element count, and where each starts."""
    counts = np.array([value.size for value in values], np.int64)
    starts = np.zeros(len(values), np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    flat = np.empty(int(counts.sum()), np.float64)
    for value, start, count in zip(values, starts.tolist(), counts.tolist()):
        flat[start : start + count] = value.reshape(-1)  # cast on the copy; bfloat16 and ints included
    return flat, counts, starts


def batch_stats(values: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """What :meth:`TensorStats.result` gives for each of ``values`` (numeric arrays, of any shape).

    Empty arrays are handed to :class:`TensorStats`; the others are summarised together.
    """
    results: list[dict[str, Any] | None] = [None] * len(values)
    full = [i for i, value in enumerate(values) if value.size]
    for i, value in enumerate(values):
        if not value.size:
            results[i] = TensorStats(0).result()
    if full:
        for i, result in zip(full, _stats([values[i] for i in full])):
            results[i] = result
    return results  # type: ignore[return-value]  # every place filled


def _stats(values: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    flat, counts, starts = _flat(values)
    finite = np.isfinite(flat)
    zeros = np.add.reduceat(flat == 0, starts, dtype=np.int64)
    if finite.all():
        nan = inf = np.zeros(len(values), np.int64)
        low, high = np.minimum.reduceat(flat, starts), np.maximum.reduceat(flat, starts)
        kept = counts
        summed = np.add.reduceat(flat, starts)
    else:  # sums over the finite values only: the others count as 0, and as +-inf for min and max
        nan = np.add.reduceat(np.isnan(flat), starts, dtype=np.int64)
        inf = np.add.reduceat(np.isinf(flat), starts, dtype=np.int64)
        kept = counts - nan - inf
        low = np.minimum.reduceat(np.where(finite, flat, np.inf), starts)
        high = np.maximum.reduceat(np.where(finite, flat, -np.inf), starts)
        flat = np.where(finite, flat, 0.0)
        summed = np.add.reduceat(flat, starts)
    some = kept > 0
    mean = np.where(some, summed / np.maximum(kept, 1), 0.0)
    centred = flat - np.repeat(mean, counts)
    if not finite.all():
        centred[~finite] = 0.0
    m2 = np.add.reduceat(centred * centred, starts)
    hists, binned = _histograms(flat, finite, counts, starts, low, high, some)
    return [
        {
            "mean": float(mean[i]) if some[i] else None,
            "std": math.sqrt(m2[i] / kept[i]) if some[i] else None,
            "min": float(low[i]) if some[i] else None,
            "max": float(high[i]) if some[i] else None,
            "zeros": int(zeros[i]) / int(counts[i]),
            "nan": int(nan[i]),
            "inf": int(inf[i]),
            "hist": hists[i],
            "binned": int(binned[i]),
        }
        for i in range(len(values))
    ]


def _histograms(
    flat: np.ndarray,
    finite: np.ndarray,
    counts: np.ndarray,
    starts: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    some: np.ndarray,
) -> tuple[list[dict[str, Any] | None], np.ndarray]:
    """Each tensor's histogram on the grid :class:`TensorStats` would choose, all in one ``bincount``."""
    steps = np.array([sample_step(n) for n in counts.tolist()], np.int64)
    k = np.array(
        [fitting_scale(lo, hi) for lo, hi in zip(np.where(some, low, 0.0).tolist(), np.where(some, high, 0.0).tolist())]
    )
    first = np.floor(np.ldexp(np.where(some, low, 0.0), -k)).astype(np.int64)
    position = np.arange(flat.size, dtype=np.int64) - np.repeat(starts, counts)
    chosen = finite & (position % np.repeat(steps, counts) == 0)
    owner = np.repeat(np.arange(counts.size, dtype=np.int64), counts)[chosen]
    grid = np.floor(np.ldexp(flat[chosen], -k[owner])).astype(np.int64) - first[owner]
    table = np.bincount(owner * BINS + grid, minlength=counts.size * BINS).reshape(-1, BINS)
    lasts = (np.floor(np.ldexp(np.where(some, high, 0.0), -k)).astype(np.int64) - first + 1).tolist()
    edges = np.ldexp(first.astype(np.float64), k).tolist(), np.ldexp((first + lasts).astype(np.float64), k).tolist()
    hists: list[dict[str, Any] | None] = [
        {"lo": edges[0][i], "hi": edges[1][i], "counts": row[:last]} if ok else None
        for i, (row, last, ok) in enumerate(zip(table.tolist(), lasts, some.tolist()))
    ]
    binned = table.sum(axis=1)
    return hists, binned


def batch_changes(old: Sequence[np.ndarray], new: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """What :meth:`ChangeStats.result` gives for each pair (arrays of equal size), with the squared
    norms of the change (``diff_sq``) and of the old values (``old_sq``) for the layer strip."""
    a, counts, starts = _flat(old)
    b, _, _ = _flat(new)
    results = [change_result(0.0, 0.0, 0.0, 0.0, 0.0) | {"diff_sq": 0.0, "old_sq": 0.0} for _ in old]
    full = np.flatnonzero(counts)
    if not full.size:
        return results
    starts = starts[full]
    change = b - a
    sums = [np.add.reduceat(x * y, starts) for x, y in ((a, a), (b, b), (a, b), (change, change))]
    max_abs = np.maximum.reduceat(np.abs(change), starts)
    for i, index in enumerate(full.tolist()):
        old_sq, new_sq, dot, diff_sq = (float(column[i]) for column in sums)
        results[index] = change_result(old_sq, new_sq, dot, diff_sq, float(max_abs[i]))
        results[index] |= {"diff_sq": diff_sq, "old_sq": old_sq}
    return results
