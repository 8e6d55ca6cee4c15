"""Byte ranges of an object, as :mod:`.ranged` asks for them: merged, subtracted, cut into requests."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["Span", "Spans", "blocks", "clipped", "merge", "subtract"]

Span = tuple[int, int]  # [start, end) in the object
#: Spans as callers hold them: pairs, or an ``(n, 2)`` integer array (a restore's 20,000
#: tensors: made into pairs and sorted in Python, they cost 20 ms of its GIL).
Spans = Iterable[Span] | np.ndarray


def _pairs(spans: Spans) -> np.ndarray:
    if isinstance(spans, np.ndarray):
        return spans.reshape(-1, 2)
    return np.array(spans if isinstance(spans, list) else list(spans), np.int64).reshape(-1, 2)


def clipped(spans: Spans, size: int) -> np.ndarray:
    """``spans`` as an ``(n, 2)`` array, each cut to ``[0, size)``."""
    return np.clip(_pairs(spans), 0, size)


def merge(spans: Spans, gap: int) -> list[Span]:
    """Sorted spans, overlapping or less than ``gap`` apart ones joined.

    Examples:
        >>> merge([(10, 20), (0, 5), (22, 30), (4, 6), (7, 7)], 2)
        [(0, 6), (10, 30)]
    """
    pairs = _pairs(spans)
    pairs = pairs[pairs[:, 1] > pairs[:, 0]]
    if not len(pairs):
        return []
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    # A span starts a new run where it begins more than gap past every end before it.
    ends = np.maximum.accumulate(pairs[:, 1])
    breaks = np.flatnonzero(pairs[1:, 0] - ends[:-1] > gap) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [len(pairs) - 1]))
    return list(zip(pairs[firsts, 0].tolist(), ends[lasts].tolist()))


def subtract(spans: list[Span], have: list[Span]) -> list[Span]:
    """The parts of sorted disjoint ``spans`` not in sorted disjoint ``have``."""
    missing: list[Span] = []
    i = 0
    for start, end in spans:
        while i < len(have) and have[i][1] <= start:
            i += 1
        j, cursor = i, start
        while j < len(have) and have[j][0] < end:
            if have[j][0] > cursor:
                missing.append((cursor, have[j][0]))
            cursor = max(cursor, have[j][1])
            j += 1
        if cursor < end:
            missing.append((cursor, end))
    return missing


def blocks(spans: list[Span], size: int) -> list[Span]:
    """``spans`` cut into requests of at most :data:`size` bytes."""
    return [(s, min(s + size, end)) for start, end in spans for s in range(start, end, size)]
