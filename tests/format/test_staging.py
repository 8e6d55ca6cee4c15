"""copy_values: the copies an async save writes from, large arrays copied in pieces on threads."""

from __future__ import annotations

import numpy as np
import pytest

from trackpoint._format.staging import PIECE_BYTES, copy_values


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_value_is_copied_equal_and_independent_of_its_source(threads) -> None:
    large = np.arange(3 * PIECE_BYTES // 4 + 5, dtype=np.float32)  # pieces and a short last one
    small = np.ones((2, 3), np.int64)
    strided = np.arange(PIECE_BYTES // 2, dtype=np.float64)[::2]  # large, not contiguous
    names = np.array([b"a", b"bc"], dtype=object)
    values = [large, small, strided, names, b"raw", np.float32(2.5)]
    copies = copy_values(values, threads)
    for source, copy in zip(values, copies):
        if isinstance(source, bytes):
            assert copy is source  # immutable: kept
            continue
        assert copy.dtype == np.asarray(source).dtype and np.array_equal(copy, source)
        assert not np.shares_memory(copy, source)
    large[:] = -1
    strided[:] = -1
    assert copies[0][-1] == 3 * PIECE_BYTES // 4 + 4 and copies[2][0] == 0
