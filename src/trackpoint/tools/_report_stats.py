"""Statistics of a tensor and of its change, gathered a chunk at a time (``trackpoint report``).

A chunk is what a reader hands out (a few MiB at most), so memory stays bounded by a chunk
whatever the tensor's size, and each pass over it runs on cached memory. Per tensor:

- count, mean and standard deviation of the finite values (chunks combined exactly, by Chan's
  parallel rule, so a mean far from zero keeps its spread), min and max, the fraction of zeros,
  NaN and Inf counts;
- a histogram of :data:`BINS` equal bins. Its range is not known until the end, so it starts at
  the first chunk's and doubles its bin width (merging pairs of bins) whenever a value falls
  outside: every count stays exact for its bin. Of a tensor larger than :data:`HISTOGRAM_SAMPLE`
  elements every k-th element is binned (binning costs ten times the other statistics), and
  the result says how many were;
- against an older version of the same shape: the relative L2 change, the cosine similarity
  and the largest absolute difference.

Examples:
    >>> import numpy as np
    >>> stats = TensorStats()
    >>> for chunk in np.array_split(np.array([0.0, 1.0, 2.0, 3.0, np.nan]), 3):
    ...     stats.add(chunk)
    >>> result = stats.result()
    >>> result["mean"], result["min"], result["max"], result["zeros"], result["nan"]
    (1.5, 0.0, 3.0, 0.2, 1)
    >>> sum(result["hist"]["counts"])
    4
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import xxhash

__all__ = ["BINS", "HISTOGRAM_SAMPLE", "ChangeStats", "TensorStats", "digest", "paired"]

BINS = 64
HISTOGRAM_SAMPLE = 1 << 20  # elements binned per tensor at most


def _as_float(chunk: np.ndarray) -> np.ndarray:
    """``chunk`` as float32 or float64 values (bfloat16, float16, ints and bools widened)."""
    if chunk.dtype == np.float32 or chunk.dtype == np.float64:
        return chunk
    if chunk.dtype.kind in "iub" and chunk.dtype.itemsize >= 4:
        return chunk.astype(np.float64)
    return chunk.astype(np.float32)


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """The dot product of two 1-D arrays of one dtype.

    float32 goes to BLAS; float64 does not: OpenBLAS splits a float64 dot of a chunk over its
    threads, which on a busy 2-core machine took 12-34 ms a chunk against 0.7 ms for einsum.
    """
    return float(np.dot(x, y) if x.dtype == np.float32 else np.einsum("i,i->", x, y))


class _Histogram:
    """Equal bins over a range that grows by doubling, exact counts (see the module docstring)."""

    def __init__(self) -> None:
        self.lo = 0.0
        self.width = 0.0  # 0 until the first finite value
        self.counts = np.zeros(BINS, np.int64)

    def add(self, values: np.ndarray, low: float, high: float) -> None:
        """Bin finite ``values``, whose min and max are ``low`` and ``high``."""
        if not values.size:
            return
        if self.width == 0.0:
            self.lo = low
            # BINS - 1 bins span the first values, so that their max lies inside the last one.
            self.width = (high - low) / (BINS - 1) if high > low else max(abs(low), 1.0) / BINS
        while low < self.lo or high >= self.lo + BINS * self.width:
            self._widen(low < self.lo)
        # In float64: a float32 difference from a far-off lo would move values across edges.
        index = ((values.astype(np.float64) - self.lo) / self.width).astype(np.intp)
        np.clip(index, 0, BINS - 1, out=index)  # the last edge's rounding
        self.counts += np.bincount(index, minlength=BINS)

    def _widen(self, downwards: bool) -> None:
        """Double the bin width, merging pairs; the range grows downwards or upwards."""
        merged = self.counts.reshape(-1, 2).sum(axis=1)
        self.width *= 2
        self.counts = np.zeros(BINS, np.int64)
        if downwards:  # the old range becomes the upper half
            self.lo -= BINS // 2 * self.width
            self.counts[BINS // 2 :] = merged
        else:
            self.counts[: BINS // 2] = merged

    def result(self) -> dict[str, Any] | None:
        """The bins from the first to the last that holds a value (a range widened by doubling
        may have empty bins at its ends)."""
        used = np.flatnonzero(self.counts)
        if not used.size:
            return None
        first, last = int(used[0]), int(used[-1]) + 1
        lo = self.lo + first * self.width
        return {"lo": lo, "hi": self.lo + last * self.width, "counts": self.counts[first:last].tolist()}


class TensorStats:
    """The statistics of one tensor's values, given a chunk at a time (:meth:`add`).

    Args:
        size: The tensor's element count, to choose which elements the histogram bins (None: all).
        hashed: Also compute the xxh3-128 of the raw bytes (to find a renamed tensor).
    """

    def __init__(self, size: int | None = None, hashed: bool = False) -> None:
        self.count = 0  # finite values
        self.mean = 0.0
        self.m2 = 0.0  # sum of squared deviations from the mean
        self.low = math.inf
        self.high = -math.inf
        self.elements = 0
        self.zeros = 0
        self.nan = 0
        self.inf = 0
        self.step = max(1, -(-size // HISTOGRAM_SAMPLE)) if size else 1
        self.binned = 0
        self.histogram = _Histogram()
        self.hash = xxhash.xxh3_128() if hashed else None
        self._spare: dict[np.dtype, np.ndarray] = {}  # a chunk's temporaries, kept for the next chunk

    def _temporary(self, like: np.ndarray, dtype: np.dtype | None = None) -> np.ndarray:
        """Memory for one temporary the size of ``like`` (reused: a fresh array per chunk faults in its pages)."""
        dtype = np.dtype(dtype or like.dtype)
        spare = self._spare.get(dtype)
        if spare is None or spare.size < like.size:
            spare = self._spare[dtype] = np.empty(like.size, dtype)
        return spare[: like.size]

    def add(self, chunk: np.ndarray) -> None:
        """Take the next values (a 1-D array, any numeric dtype; valid only during the call)."""
        if self.hash is not None:
            self.hash.update(np.ascontiguousarray(chunk).data)
        offset = self.elements
        self.elements += chunk.size
        if not chunk.size:
            return
        values = _as_float(chunk)
        # A count of bools: ten times faster than counting the floats that are not zero.
        self.zeros += int(np.count_nonzero(np.equal(values, 0, out=self._temporary(values, np.dtype(bool)))))
        low, high = float(values.min()), float(values.max())
        if not (math.isfinite(low) and math.isfinite(high)):  # NaN or Inf somewhere: count, then drop them
            nan = np.isnan(values)
            self.nan += int(np.count_nonzero(nan))
            self.inf += int(np.count_nonzero(np.isinf(values)))
            values = values[np.isfinite(values)]
            if not values.size:
                return
            low, high = float(values.min()), float(values.max())
        mean = float(values.sum()) / values.size  # pairwise in the values' dtype; the spread is exact below
        centred = np.subtract(values, values.dtype.type(mean), out=self._temporary(values))
        m2 = _dot(centred, centred)
        total = self.count + values.size
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.count * values.size / total
        self.mean += delta * values.size / total
        self.count = total
        self.low, self.high = min(self.low, low), max(self.high, high)
        first = (-offset) % self.step  # the sample continues across chunks
        sample = values[first :: self.step] if self.step > 1 else values
        if sample.size:
            self.histogram.add(sample, float(sample.min()), float(sample.max()))
            self.binned += sample.size

    def result(self) -> dict[str, Any]:
        """The statistics as the report's data holds them (see :mod:`trackpoint.tools.report`)."""
        finite = self.count > 0
        return {
            "mean": self.mean if finite else None,
            "std": math.sqrt(self.m2 / self.count) if finite else None,
            "min": self.low if finite else None,
            "max": self.high if finite else None,
            "zeros": self.zeros / self.elements if self.elements else None,
            "nan": self.nan,
            "inf": self.inf,
            "hist": self.histogram.result(),
            "binned": self.binned,
        }


class ChangeStats:
    """How a tensor changed: given the old and new values a chunk pair at a time (:meth:`add`)."""

    def __init__(self) -> None:
        self.old_sq = 0.0
        self.new_sq = 0.0
        self.dot = 0.0
        self.diff_sq = 0.0
        self.max_abs = 0.0
        self.finite = True

    def add(self, old: np.ndarray, new: np.ndarray) -> None:
        """Take the next values of both (1-D arrays of equal length)."""
        a, b = _as_float(old), _as_float(new)
        if a.dtype != b.dtype:
            a, b = a.astype(np.float64), b.astype(np.float64)
        change = b - a
        self.old_sq += _dot(a, a)
        self.new_sq += _dot(b, b)
        self.dot += _dot(a, b)
        self.diff_sq += _dot(change, change)
        if change.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(change))))
        self.finite = self.finite and math.isfinite(self.diff_sq) and math.isfinite(self.dot)

    def result(self) -> dict[str, float | None]:
        """``rel_l2`` (the change's norm over the old values'), ``cosine`` and ``max_abs``; None where
        undefined (an all-zero old tensor changed, values that are not finite)."""
        if not self.finite:
            return {"rel_l2": None, "cosine": None, "max_abs": None}
        rel = math.sqrt(self.diff_sq / self.old_sq) if self.old_sq else (0.0 if not self.diff_sq else None)
        norms = math.sqrt(self.old_sq * self.new_sq)
        cosine = max(-1.0, min(1.0, self.dot / norms)) if norms else None
        return {"rel_l2": rel, "cosine": cosine, "max_abs": self.max_abs}


def digest(chunks: Iterator[np.ndarray]) -> str:
    """The xxh3-128 of the bytes of ``chunks``, in hex."""
    hashed = xxhash.xxh3_128()
    for chunk in chunks:
        hashed.update(np.ascontiguousarray(chunk).data)
    return hashed.hexdigest()


def paired(old: Iterator[np.ndarray], new: Iterator[np.ndarray]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The values of two equally long streams of chunks, cut into pairs of equal length.

    Each stream is advanced only when its chunk is used up, so a chunk (valid until its stream's
    next one) is never read after it was replaced.
    """
    a = b = np.empty(0)
    while True:
        if not a.size:
            a = next(old, None)  # type: ignore[arg-type]  # None ends the loop below
        if not b.size:
            b = next(new, None)  # type: ignore[arg-type]
        if a is None or b is None:
            return
        n = min(a.size, b.size)
        yield a[:n], b[:n]
        a, b = a[n:], b[n:]
