"""Byte ranges of an object, as :mod:`.ranged` asks for them: merged, subtracted, cut into requests."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Span", "blocks", "merge", "subtract"]

Span = tuple[int, int]  # [start, end) in the object


def merge(spans: Iterable[Span], gap: int) -> list[Span]:
    """Sorted spans, overlapping or less than ``gap`` apart ones joined."""
    merged: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start - merged[-1][1] <= gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


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
