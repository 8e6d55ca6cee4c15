"""Byte ranges as a ranged object merges them: the same runs from pairs and from arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from trackpoint._storage.spans import clipped, merge

_spans = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60)).map(lambda p: (p[0], p[0] + p[1])), max_size=60)


def _runs_by_bytes(spans: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """The reference: mark every byte asked for, then join runs whose holes are at most ``gap``."""
    marked = np.zeros(400, bool)
    for start, end in spans:
        marked[start:end] = True
    runs: list[list[int]] = []
    for i in np.flatnonzero(marked).tolist():
        if runs and i - runs[-1][1] <= gap:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [(a, b) for a, b in runs]


@given(_spans, st.integers(0, 20))
def test_merge_joins_what_overlaps_or_lies_within_the_gap(spans: list[tuple[int, int]], gap: int) -> None:
    expected = _runs_by_bytes(spans, gap)
    assert merge(spans, gap) == expected
    assert merge(np.array(spans, np.int64).reshape(-1, 2), gap) == expected
    assert merge(iter(spans), gap) == expected


def test_clipped_cuts_spans_to_the_object() -> None:
    assert clipped([(-5, 3), (8, 20)], 10).tolist() == [[0, 3], [8, 10]]
    assert clipped((), 10).shape == (0, 2)
