"""Statistics of a tensor and of its change, gathered a chunk at a time (``trackpoint report``).

A chunk is what a reader hands out (a few MiB at most), so memory stays bounded by a chunk
whatever the tensor's size, and each pass over it runs on cached memory. A large tensor may be
read in parts at once, one :class:`TensorStats` each, merged in order. Per tensor:

- count, mean and standard deviation of the finite values (chunks and parts combined by Chan's
  parallel rule), min and max, the fraction of zeros, NaN and Inf counts. A chunk's spread
  comes from its sum and sum of squares (two BLAS dot products) unless its mean is large against
  its spread, where those would cancel: then it is summed again about its mean;
- a histogram of at most :data:`BINS` bins of width ``2**k``, laid on multiples of it (see
  :func:`histogram`): each value's bin is exact, and the grid depends only on the extremes of
  all the values, not on the chunks and parts. The elements it bins are kept (float64) and
  binned once at the end: all of a small tensor's, every k-th of a larger one's (see
  :func:`sample_step`), so memory stays bounded, and the result says how many were;
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
    "ALL_BINNED",
    "BINS",
    "FINEST",
    "HISTOGRAM_SAMPLE",
    "ChangeStats",
    "TensorStats",
    "Workspace",
    "change_result",
    "digest",
    "fitting_scale",
    "histogram",
    "paired",
    "sample_step",
]

BINS = 64
HISTOGRAM_SAMPLE = 1 << 16  # elements binned per tensor at most
ALL_BINNED = 1 << 13  # tensors of up to this many elements have every one binned
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
    as accurate on values about zero (OpenBLAS keeps several partial sums); where the mean is far
    from zero :meth:`TensorStats.add` sums pairwise again. float64 is summed pairwise (see :func:`_dot`).
    """
    global _ONES
    if values.dtype != np.float32:
        return float(values.sum())
    ones = _ONES  # read once: another thread may replace it meanwhile (never write into it)
    if ones.size < values.size:
        ones = _ONES = np.ones(values.size, np.float32)
    return float(np.dot(values, ones[: values.size]))


def fitting_scale(low: float, high: float) -> int:
    """The smallest ``k`` whose grid puts ``low`` and ``high`` fewer than :data:`BINS` bins apart,
    but bins no narrower than :data:`FINEST` of the larger magnitude (which gives a single
    value, or many equal ones, a scale)."""
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


def sample_step(size: int) -> int:
    """Of a tensor of ``size`` elements, every how many'th the histogram bins.

    All of them up to :data:`ALL_BINNED`, then as many as that, then an eighth, then
    :data:`HISTOGRAM_SAMPLE` at most: binning costs about 2 ns an element (five passes), so an
    eighth at most keeps it a small part of a report's time per byte, and 65,536 values put
    a thousand in a typical bin.

    Examples:
        >>> [sample_step(n) for n in (100, 8_192, 16_384, 65_536, 1_000_000, 100_000_000)]
        [1, 1, 2, 8, 16, 1526]
    """
    target = min(HISTOGRAM_SAMPLE, max(ALL_BINNED, size // 8))
    return max(1, -(-size // target))


def histogram(sample: np.ndarray, low: float, high: float, workspace: Workspace | None = None) -> dict[str, Any] | None:
    """The bins of ``sample`` (finite float64 values between ``low`` and ``high``, the extremes
    of all the tensor's finite values), from the one that holds ``low`` to the one that holds
    ``high``: a sample that missed the extremes still shows the whole range.

    Bin ``j`` holds ``[j, j + 1) * 2**k`` for the ``k`` of :func:`fitting_scale`: scaling by a
    power of two and flooring round nothing, so each value's bin is exact, and the grid depends
    on the extremes alone, not on the chunks or parts the sample came in. The work is done in
    ``workspace``'s arrays (by default, new ones).
    """
    if not sample.size:
        return None
    workspace = workspace or Workspace()
    k = fitting_scale(low, high)
    first = math.floor(math.ldexp(low, -k))
    scaled = workspace.array("scaled", sample.size, np.float64)
    if -1022 <= k <= 1022:  # 2**-k is a float64: multiplying by it is ldexp's result, three times faster
        np.multiply(sample, math.ldexp(1.0, -k), out=scaled)
    else:
        np.ldexp(sample, -k, out=scaled)
    np.floor(scaled, out=scaled)
    scaled -= first
    index = workspace.array("bins", sample.size, np.intp)
    np.copyto(index, scaled, casting="unsafe")  # whole numbers from 0 to BINS - 1
    last = math.floor(math.ldexp(high, -k)) - first  # the bins span min to max, sampled or not
    counts = np.bincount(index, minlength=last + 1)
    return {"lo": math.ldexp(first, k), "hi": math.ldexp(first + last + 1, k), "counts": counts.tolist()}


class Workspace:
    """Memory that one thread's statistics work in, reused from tensor to tensor.

    A fresh array faults its pages in as it is first written, and on a machine whose memory is
    backed lazily (this VM: about 3 us per 4 KiB page) a temporary per tensor cost more than
    the statistics: 1 GiB of 512 KiB tensors took 12 s to report, against 0.14 s to read.
    Each named array only grows. A :class:`TensorStats` keeps its sample in its workspace until
    :meth:`TensorStats.result`, so a workspace serves one tensor (or part) at a time.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def array(self, name: str, size: int, dtype: np.dtype | type) -> np.ndarray:
        """``size`` elements of ``dtype`` under ``name`` (its earlier contents undefined)."""
        dtype = np.dtype(dtype)
        held = self._arrays.get(name)
        if held is None or held.nbytes < size * dtype.itemsize:
            held = self._arrays[name] = np.empty(size * dtype.itemsize, np.uint8)
        return held[: size * dtype.itemsize].view(dtype)


class TensorStats:
    """The statistics of one tensor's values, given a chunk at a time (:meth:`add`).

    A tensor read in parts (on several threads) has one ``TensorStats`` per part, each told where
    its part starts, and :meth:`merge` joins them in order.

    Args:
        size: The tensor's element count, to choose which elements the histogram bins (None: all).
        hashed: Also compute the xxh3-128 of the raw bytes (to find a renamed tensor).
        start: The index of the first element this one is given (a part's start).
        workspace: Where temporaries and the sample are kept (see :class:`Workspace`); by default its own.
    """

    def __init__(
        self, size: int | None = None, hashed: bool = False, start: int = 0, workspace: Workspace | None = None
    ) -> None:
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
        self.step = sample_step(size) if size else 1
        self.binned = 0
        self.hash = xxhash.xxh3_128() if hashed else None
        self._workspace = workspace or Workspace()
        # The elements binned, as float64: binned once at the end, when the extremes are known.
        # Room for the whole tensor's sample, so that the parts after this one can be merged in.
        self._sample = self._workspace.array("sample", -(-size // self.step) + 8 if size else 0, np.float64)

    def _temporary(self, like: np.ndarray, dtype: np.dtype | None = None) -> np.ndarray:
        """Memory for one temporary the size of ``like``, from the workspace."""
        dtype = np.dtype(dtype or like.dtype)
        return self._workspace.array(f"temporary {dtype}", like.size, dtype)

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
        first = (-offset) % self.step  # every step-th element of the tensor, whatever the parts and chunks
        sample = values[first :: self.step] if self.step > 1 else values
        # A count of bools: ten times faster than counting the floats that are not zero.
        self.zeros += int(np.count_nonzero(np.equal(values, 0, out=self._temporary(values, np.dtype(bool)))))
        low, high = float(values.min()), float(values.max())
        if not (math.isfinite(low) and math.isfinite(high)):  # NaN or Inf somewhere: count, then drop them
            self.nan += int(np.count_nonzero(np.isnan(values)))
            self.inf += int(np.count_nonzero(np.isinf(values)))
            values, sample = values[np.isfinite(values)], sample[np.isfinite(sample)]
            if not values.size:
                return math.nan
            low, high = float(values.min()), float(values.max())
        if 0 < max(-low, high) < 2.0**-60:  # squares would fall below float32's normal range
            values = values.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            total, squares = _sum(values), _dot(values, values)
            if values.dtype == np.float32 and not (math.isfinite(total) and math.isfinite(squares)):
                values = values.astype(np.float64)  # float32 overflowed: values near its max
                total, squares = _sum(values), _dot(values, values)
        mean = total / values.size
        m2 = squares - total * mean
        if not m2 >= squares / 2:
            # The mean is large against the spread: the sum of squares would cancel, and the sum
            # (BLAS's) may have lost digits the spread needs. Sum again pairwise, then the squares
            # about that mean (four passes more), and correct the mean by what the centred values sum to.
            centre = values.dtype.type(float(values.sum()) / values.size)
            centred = np.subtract(values, centre, out=self._temporary(values))
            missed = float(centred.sum()) / values.size
            mean = float(centre) + missed
            m2 = max(0.0, _dot(centred, centred) - missed * missed * values.size)
        self._combine(values.size, mean, m2, low, high)
        if sample.size:
            self._keep(sample)
        return squares if values.size == chunk.size else math.nan

    def _keep(self, sample: np.ndarray) -> None:
        """Put ``sample`` after the elements kept so far."""
        end = self.binned + sample.size
        if end > self._sample.size:  # a size not given, or parts merged: grow by doubling
            grown = np.empty(max(end, 2 * self._sample.size), np.float64)
            grown[: self.binned] = self._sample[: self.binned]
            self._sample = grown
        self._sample[self.binned : end] = sample
        self.binned = end

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
        self._keep(other._sample[: other.binned])

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
            "hist": histogram(self._sample[: self.binned], self.low, self.high, self._workspace) if finite else None,
            "binned": self.binned,
        }


class ChangeStats:
    """How a tensor changed: given the old and new values a chunk pair at a time (:meth:`add`).

    Args:
        workspace: Where the change of a chunk is computed (see :class:`Workspace`); by default its own.
    """

    def __init__(self, workspace: Workspace | None = None) -> None:
        self.old_sq = 0.0
        self.new_sq = 0.0
        self.dot = 0.0
        self.diff_sq = 0.0
        self.max_abs = 0.0
        self.finite = True
        self._workspace = workspace or Workspace()

    def add(self, old: np.ndarray, new: np.ndarray, new_sq: float | None = None) -> None:
        """Take the next values of both (1-D arrays of equal length), and the new values' sum of
        squares if known (what :meth:`TensorStats.add` of them returned)."""
        a, b = _as_float(old), _as_float(new)
        if a.dtype != b.dtype:
            a, b = a.astype(np.float64), b.astype(np.float64)
        change = np.subtract(b, a, out=self._workspace.array(f"change {a.dtype}", a.size, a.dtype))
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
