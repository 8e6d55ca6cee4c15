"""Copies of arrays that a later write reads while their owners go on changing the originals.

Why threads: an async save returns once its values are copied, so the copy is what the caller
waits for. One thread copies at the speed of one core faulting in fresh pages; numpy's copy
releases the GIL, so large arrays are copied in pieces on several threads (an async save of
1.5 GiB returned in 0.14-0.85 s against 0.31-2.11 s with one copy per array here; PERFORMANCE.md,
"trackpoint.torch").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from trackpoint._format.slices import SlicedValue, SliceSet
from trackpoint._format.threads import default_workers, parallel_map

__all__ = ["PIECE_BYTES", "copy_values"]

#: Arrays this large or larger are copied in pieces of this size, several at a time.
PIECE_BYTES = 8 << 20


def copy_values(values: list[Any], threads: int | None = None) -> list[Any]:
    """A copy of each array of ``values`` (``bytes``, immutable, are kept as they are).

    Examples:
        >>> a = np.zeros(3)
        >>> b, = copy_values([a])
        >>> a[0] = 1.0
        >>> b.tolist()
        [0.0, 0.0, 0.0]
    """
    out: list[Any] = []
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    for value in values:
        if isinstance(value, bytes):
            out.append(value)
            continue
        if isinstance(value, SlicedValue):
            out.append(replace(value, value=copy_values([value.value], threads)[0]))
            continue
        if isinstance(value, SliceSet):
            out.append(replace(value, parts=tuple(copy_values(list(value.parts), threads))))
            continue
        array = np.asarray(value)
        if array.nbytes < PIECE_BYTES or array.dtype.hasobject or not array.flags.c_contiguous:
            out.append(np.array(array, copy=True))
            continue
        copy = np.empty_like(array)
        source, target = array.reshape(-1), copy.reshape(-1)
        step = max(1, PIECE_BYTES // array.itemsize)
        pieces.extend((source[i : i + step], target[i : i + step]) for i in range(0, source.size, step))
        out.append(copy)
    if pieces:
        parallel_map(lambda piece: np.copyto(piece[1], piece[0]), pieces, threads or default_workers())
    return out
