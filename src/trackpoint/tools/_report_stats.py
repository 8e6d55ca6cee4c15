"""Statistics of a tensor and of its change, gathered a chunk at a time (``trackpoint report``).

A chunk is what a reader hands out (a few MiB at most), so memory stays bounded by a chunk
whatever the tensor's size, and each pass over it runs on cached memory. A large tensor may be
read in parts at once, one :class:`TensorStats` each, merged in order. Per tensor:

- count, mean and standard deviation of the finite values (chunks and parts combined by Chan's
  parallel rule), min and max, the fraction of zeros, NaN and Inf counts. A chunk's spread
  comes from its sum and sum of squares (two BLAS dot products) unless its mean is large against
  its spread, where those would cancel: then it is summed again about its mean;
- a histogram of at most :data:`BINS` bins of width ``2**k``, laid on multiples of it: a value's
  bin is exact, and the grid is the one all the values at once would choose (the narrowest
  that spans their range, see :func:`fitting_scale`) whatever the chunks and parts, which
  coarsen to it as values come. Of a tensor larger than :data:`HISTOGRAM_SAMPLE` elements every
  k-th element is binned (binning costs several passes), and the result says how many were;
- against an older version of the same shape: the relative L2 change, the cosine similarity
  and the largest absolute difference.

Examples:
    >>> import numpy as np
    >>> stats = TensorStats()
    >>> for chunk in np.array_split(np.array([0.0, 1.0, 2.0, 3.0, np.nan]), 3):
    ...     _ = stats.add(chunk)
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

__all__ = [
    "BINS",
    "FINEST",
    "HISTOGRAM_SAMPLE",
    "ChangeStats",
    "TensorStats",
    "change_result",
    "digest",
    "fitting_scale",
    "paired",
]

BINS = 64
HISTOGRAM_SAMPLE = 1 << 18  # elements binned per tensor at most
_SMALLEST = -1074  # the scale of float64's smallest subnormal
FINEST = 20  # bins are at least 2**-FINEST times the largest magnitude wide (float32 holds 24 bits)


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


_ONES = np.ones(0, np.float32)


def _sum(values: np.ndarray) -> float:
    """The sum of a 1-D float32 or float64 array.

    float32 goes to BLAS, as a dot product with ones: half the time of numpy's pairwise sum, and
    as accurate on values about zero (OpenBLAS keeps several partial sums); a mean far from zero
    is corrected by :meth:`TensorStats.add`. float64 is summed pairwise (see :func:`_dot`).
    """
    global _ONES
    if values.dtype != np.float32:
        return float(values.sum())
    if _ONES.size < values.size:
        _ONES = np.ones(values.size, np.float32)  # replaced whole, never written: safe across threads
    return float(np.dot(values, _ONES[: values.size]))


class _Histogram:
    """Counts in bins of width ``2**k`` laid on multiples of it: bin ``j`` holds ``[j, j + 1) * 2**k``.

    On such a grid a value's bin is exact (scaling by a power of two and flooring round nothing),
    the bins do not depend on the order the values come in, and two histograms merge exactly: the
    finer is coarsened (bin ``j`` into ``j >> 1``) to the other's width. The range grows by
    coarsening until it spans at most :data:`BINS` bins.
    """

    def __init__(self) -> None:
        self.k: int | None = None  # None until the first finite value
        self.first = 0  # the grid index of counts[0]
        self.counts = np.zeros(0, np.int64)

    def add(self, values: np.ndarray, low: float, high: float) -> None:
        """Bin finite ``values``, whose min and max are ``low`` and ``high``."""
        if not values.size:
            return
        k = fitting_scale(low, high)
        if self.k is None:
            self.k = k
        self._coarsen_to(k)
        self._cover(low, high)
        scaled = np.floor(np.ldexp(values.astype(np.float64), -self.k))
        index = scaled.astype(np.int64) - self.first
        self.counts += np.bincount(index, minlength=self.counts.size)

    def merge(self, other: _Histogram) -> None:
        """Add ``other``'s counts (at the coarser of the two widths, or coarser still to fit both)."""
        if other.k is None:
            return
        other = other._copy()
        if self.k is None:
            self.k, self.first, self.counts = other.k, other.first, other.counts
            return
        self._coarsen_to(other.k)
        other._coarsen_to(self.k)
        self._cover(math.ldexp(other.first, self.k), math.ldexp(other.first + other.counts.size - 1, self.k))
        other._coarsen_to(self.k)
        start = other.first - self.first
        self.counts[start : start + other.counts.size] += other.counts

    def _cover(self, low: float, high: float) -> None:
        """Widen the range (coarsening as needed) to hold ``low`` and ``high`` too."""
        assert self.k is not None
        while True:
            lo, hi = math.floor(math.ldexp(low, -self.k)), math.floor(math.ldexp(high, -self.k))
            if self.counts.size:
                lo, hi = min(lo, self.first), max(hi, self.first + self.counts.size - 1)
            if hi - lo < BINS:
                break
            self._coarsen()
        grown = np.zeros(hi - lo + 1, np.int64)
        grown[self.first - lo : self.first - lo + self.counts.size] = self.counts
        self.first, self.counts = lo, grown

    def _coarsen(self) -> None:
        """Double the bin width: bin ``j`` goes into ``j >> 1``."""
        assert self.k is not None
        index = (np.arange(self.first, self.first + self.counts.size) >> 1) - (self.first >> 1)
        self.counts = np.bincount(index, weights=self.counts).astype(np.int64) if self.counts.size else self.counts
        self.first >>= 1
        self.k += 1

    def _coarsen_to(self, k: int | None) -> None:
        while self.k is not None and k is not None and self.k < k:
            self._coarsen()

    def _copy(self) -> _Histogram:
        copy = _Histogram()
        copy.k, copy.first, copy.counts = self.k, self.first, self.counts.copy()
        return copy

    def result(self) -> dict[str, Any] | None:
        """The bins from the first to the last that holds a value."""
        used = np.flatnonzero(self.counts)
        if self.k is None or not used.size:
            return None
        first, last = int(used[0]), int(used[-1]) + 1
        return {
            "lo": math.ldexp(self.first + first, self.k),
            "hi": math.ldexp(self.first + last, self.k),
            "counts": self.counts[first:last].tolist(),
        }


def fitting_scale(low: float, high: float) -> int:
    """The smallest ``k`` whose grid puts ``low`` and ``high`` fewer than :data:`BINS` bins apart,
    but bins no narrower than :data:`FINEST` of the larger magnitude.

    A histogram that coarsens to each chunk's scale, then to fit them all, ends at the scale of
    all the values at once, whatever the chunks: the smallest that fits their range, or the
    floor their largest magnitude sets (which is what gives a single value, or many equal ones,
    a scale). In Python's ``math``: a chunk's one call costs a microsecond, where numpy's calls
    on one-element arrays cost thirty.
    """
    half_span = high / 2 - low / 2  # halves: the span itself may overflow
    magnitude = max(abs(low), abs(high))
    # Below the smallest that fits (2**k < half the span / BINS), or for one value any scale; then
    # the floors: 2**-FINEST of the magnitude (which keeps the scaled values below 2**FINEST),
    # and 2**-1074, the smallest step between float64 values (the scale of zeros alone).
    k = math.frexp(half_span)[1] - 8 if half_span > 0 else _SMALLEST
    k = max(k, math.frexp(magnitude)[1] - FINEST if magnitude > 0 else _SMALLEST, _SMALLEST)
    while math.floor(math.ldexp(high, -k)) - math.floor(math.ldexp(low, -k)) >= BINS:
        k += 1
    return k


class TensorStats:
    """The statistics of one tensor's values, given a chunk at a time (:meth:`add`).

    A tensor read in parts (on several threads) has one ``TensorStats`` per part, each told where
    its part starts, and :meth:`merge` joins them in order.

    Args:
        size: The tensor's element count, to choose which elements the histogram bins (None: all).
        hashed: Also compute the xxh3-128 of the raw bytes (to find a renamed tensor).
        start: The index of the first element this one is given (a part's start).
    """

    def __init__(self, size: int | None = None, hashed: bool = False, start: int = 0) -> None:
        self.count = 0  # finite values
        self.mean = 0.0
        self.m2 = 0.0  # sum of squared deviations from the mean
        self.low = math.inf
        self.high = -math.inf
        self.elements = 0
        self.start = start
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

    def add(self, chunk: np.ndarray) -> float:
        """Take the next values (a 1-D array, any numeric dtype; valid only during the call).

        Returns:
            The sum of their squares (NaN if one is not finite), which :meth:`ChangeStats.add` of
            these values as the new ones takes.
        """
        if self.hash is not None:
            self.hash.update(np.ascontiguousarray(chunk).data)
        offset = self.start + self.elements
        self.elements += chunk.size
        if not chunk.size:
            return 0.0
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
                return math.nan
            low, high = float(values.min()), float(values.max())
        if max(-low, high) < 2.0**-60:  # squares would fall below float32's normal range
            values = values.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            total, squares = _sum(values), _dot(values, values)
        if not (math.isfinite(total) and math.isfinite(squares)):  # float32 overflowed: values near its max
            values = values.astype(np.float64)
            total, squares = _sum(values), _dot(values, values)
        mean = total / values.size
        m2 = squares - total * mean
        if not m2 >= squares / 2:
            # The mean is large against the spread: the sum of squares would cancel, and the sum
            # may have lost digits the spread needs. Sum both again about this mean (three passes
            # more), then correct the mean by what the first sum missed.
            centred = np.subtract(values, values.dtype.type(mean), out=self._temporary(values))
            missed = float(centred.sum()) / values.size
            mean += missed
            m2 = max(0.0, _dot(centred, centred) - missed * missed * values.size)
        self._combine(values.size, mean, m2, low, high)
        first = (-offset) % self.step  # every step-th element of the tensor, whatever the parts and chunks
        sample = values[first :: self.step] if self.step > 1 else values
        if sample.size:  # binned within the chunk's range: the sample's own would cost two passes more
            self.histogram.add(sample, low, high)
            self.binned += sample.size
        return squares if values.size == chunk.size else math.nan

    def _combine(self, count: int, mean: float, m2: float, low: float, high: float) -> None:
        """Join the moments of ``count`` more finite values (Chan's rule)."""
        total = self.count + count
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.count * count / total
        self.mean += delta * count / total
        self.count = total
        self.low, self.high = min(self.low, low), max(self.high, high)

    def merge(self, other: TensorStats) -> None:
        """Add the statistics of the part that follows this one (not hashed)."""
        if other.count:
            self._combine(other.count, other.mean, other.m2, other.low, other.high)
        self.elements += other.elements
        self.zeros += other.zeros
        self.nan += other.nan
        self.inf += other.inf
        self.binned += other.binned
        self.histogram.merge(other.histogram)

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
        self._spare = np.empty(0, np.uint8)  # the change, kept for the next chunk

    def add(self, old: np.ndarray, new: np.ndarray, new_sq: float | None = None) -> None:
        """Take the next values of both (1-D arrays of equal length), and the new values' sum of
        squares if known (what :meth:`TensorStats.add` of them returned)."""
        a, b = _as_float(old), _as_float(new)
        if a.dtype != b.dtype:
            a, b = a.astype(np.float64), b.astype(np.float64)
        if self._spare.size < a.nbytes:
            self._spare = np.empty(a.nbytes, np.uint8)
        change = np.subtract(b, a, out=self._spare[: a.nbytes].view(a.dtype))
        self.old_sq += _dot(a, a)
        self.new_sq += _dot(b, b) if new_sq is None else new_sq
        self.dot += _dot(a, b)
        self.diff_sq += _dot(change, change)
        if change.size:
            self.max_abs = max(self.max_abs, float(change.max()), -float(change.min()))
        self.finite = self.finite and math.isfinite(self.diff_sq) and math.isfinite(self.dot)

    def merge(self, other: ChangeStats) -> None:
        """Add the change of another part of the tensor."""
        self.old_sq += other.old_sq
        self.new_sq += other.new_sq
        self.dot += other.dot
        self.diff_sq += other.diff_sq
        self.max_abs = max(self.max_abs, other.max_abs)
        self.finite = self.finite and other.finite

    def result(self) -> dict[str, float | None]:
        """``rel_l2`` (the change's norm over the old values'), ``cosine`` and ``max_abs``; None where
        undefined (an all-zero old tensor changed, values that are not finite)."""
        return change_result(self.old_sq, self.new_sq, self.dot, self.diff_sq, self.max_abs, self.finite)


def change_result(
    old_sq: float, new_sq: float, dot: float, diff_sq: float, max_abs: float, finite: bool = True
) -> dict[str, float | None]:
    """:meth:`ChangeStats.result` from the sums it keeps (squared norms of the old values, the new
    ones and the change, their dot product) and the largest absolute change."""
    if not (finite and math.isfinite(diff_sq) and math.isfinite(dot)):
        return {"rel_l2": None, "cosine": None, "max_abs": None}
    rel = math.sqrt(diff_sq / old_sq) if old_sq else (0.0 if not diff_sq else None)
    norms = math.sqrt(old_sq * new_sq)
    cosine = max(-1.0, min(1.0, dot / norms)) if norms else None
    return {"rel_l2": rel, "cosine": cosine, "max_abs": max_abs}


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
