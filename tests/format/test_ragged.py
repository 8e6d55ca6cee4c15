"""The bulk field writers lay out bytes as their one-at-a-time counterparts do."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from trackpoint._format import varint
from trackpoint._format.ragged import (
    Strings,
    group_sums,
    put_strings,
    put_varints,
    record_starts,
    varint_sizes,
)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_varints_are_protobufs(values: list[int]) -> None:
    expected = [varint.encode(v) for v in values]
    array = np.array(values, np.uint64)
    assert varint_sizes(array).tolist() == [len(e) for e in expected]
    out = np.zeros(10 * len(values), np.uint8)
    put_varints(out, np.arange(0, 10 * len(values), 10), array)
    assert [out[10 * i : 10 * i + len(e)].tobytes() for i, e in enumerate(expected)] == expected


@given(st.lists(st.text(max_size=6), max_size=20))
def test_strings_laid_end_to_end(values: list[str]) -> None:
    strings = Strings.of(values)
    encoded = [v.encode("utf-8") for v in values]
    assert strings.lengths.tolist() == [len(e) for e in encoded]
    out = np.zeros(int(strings.lengths.sum()) + len(values), np.uint8)
    at = np.arange(len(values)) + np.concatenate([[0], np.cumsum(strings.lengths)[:-1]]).astype(np.int64)
    put_strings(out, at, strings)
    assert out.tobytes() == b"".join(e + b"\0" for e in encoded)


def test_runs_and_record_starts() -> None:
    sizes = np.array([3, 1, 4, 1, 5])
    counts = np.array([2, 0, 3])
    assert group_sums(sizes, counts).tolist() == [4, 0, 10]
    assert record_starts(np.array([100, 200, 300]), sizes, counts).tolist() == [100, 103, 300, 304, 305]
