"""Encoding many small records at once with numpy: lengths first, then each field put in place.

A save of many variables writes one graph node and one index entry per variable: small
protobuf messages and table entries that differ only in a few numbers and strings. Built
one ``bytes`` at a time they cost microseconds each. Here an encoder computes every
record's length from its fields' lengths (integer arrays), so it knows where each field
of each record goes in the output, and then writes each field for all records at once:
a tag or constant is one strided store, a varint a store per byte of the longest, a
string column one gather-and-scatter of its bytes. Each byte of the output is written
once, whatever the nesting (see PERFORMANCE.md, "The first save").

Examples:
    >>> import numpy as np
    >>> names = Strings.of(["a", "", "bc"])
    >>> at = np.array([0, 4, 8])
    >>> out = np.zeros(12, np.uint8)
    >>> put_varints(out, at, np.array([1, 300, 0]))
    >>> put_strings(out, at + 2, names)
    >>> out.tobytes()
    b'\\x01\\x00a\\x00\\xac\\x02\\x00\\x00\\x00\\x00bc'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Strings",
    "exclusive_cumsum",
    "group_sums",
    "put_bytes",
    "put_ranges",
    "put_strings",
    "put_varints",
    "record_starts",
    "varint_sizes",
]


@dataclass(frozen=True)
class Strings:
    """A column of byte strings: string ``i`` is ``data[starts[i] : starts[i] + lengths[i]]``.

    Built end to end; :meth:`reordered` gives a column of the same bytes in another order,
    whose strings then lie anywhere in ``data``.

    Attributes:
        data: The strings' bytes (uint8).
        lengths: Each string's length in bytes (int64).
        starts: Where each string begins in ``data`` (int64); end to end when not given.
    """

    data: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray = None  # type: ignore[assignment]  # filled in by __post_init__

    def __post_init__(self) -> None:
        if self.starts is None:
            object.__setattr__(self, "starts", exclusive_cumsum(self.lengths))

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def of(cls, values: Sequence[str], errors: str = "strict") -> Strings:
        """The UTF-8 encodings of ``values``, encoded with one join and one encode."""
        data = "".join(values).encode("utf-8", errors)
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        if len(data) != int(lengths.sum()):  # some are not ASCII: byte lengths differ from char counts
            lengths = np.fromiter((len(v.encode("utf-8", errors)) for v in values), np.int64, len(values))
        return cls(np.frombuffer(data, np.uint8), lengths)

    @classmethod
    def of_bytes(cls, values: Sequence[bytes]) -> Strings:
        """``values`` as they are."""
        return cls(np.frombuffer(b"".join(values), np.uint8), np.fromiter(map(len, values), np.int64, len(values)))

    def row(self, i: int) -> bytes:
        """String ``i``."""
        start = int(self.starts[i])
        return self.data[start : start + int(self.lengths[i])].tobytes()

    def reordered(self, order: np.ndarray) -> Strings:
        """The strings ``order[0]``, ``order[1]``, ...: a view of the same bytes."""
        return Strings(self.data, self.lengths[order], self.starts[order])

    def joined(self, other: Strings) -> Strings:
        """These strings, then ``other``'s."""
        return Strings(
            np.concatenate([self.data, other.data]),
            np.concatenate([self.lengths, other.lengths]),
            np.concatenate([self.starts, other.starts + len(self.data)]),
        )


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """``[0, v0, v0 + v1, ...]`` without the total: where each of ``values`` starts."""
    out = np.zeros(len(values), np.int64)
    np.cumsum(values[:-1], out=out[1:])
    return out


def group_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sums of consecutive runs of ``values``, ``counts[g]`` of them for run ``g`` (runs may be empty)."""
    totals = np.zeros(len(values) + 1, np.int64)
    np.cumsum(values, out=totals[1:])
    ends = np.cumsum(counts)
    return totals[ends] - totals[ends - counts]


def record_starts(bases: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Where each record of a repeated field goes: run ``g``'s records one after another from ``bases[g]``."""
    totals = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=totals[1:])
    firsts = np.cumsum(counts) - counts
    return np.repeat(bases - totals[firsts], counts) + totals[:-1]


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's base-128 varint (1 for 0)."""
    values = np.asarray(values, np.uint64)
    sizes = np.ones(len(values), np.int64)
    limit = np.uint64(1 << 7)
    for _ in range(9):
        more = values >= limit
        if not more.any():
            break
        sizes += more
        limit = limit << np.uint64(7)
    return sizes


def put_varints(out: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """Write each value's varint at ``out[at[i]:]``, as protobuf encodes it."""
    values = np.asarray(values, np.uint64)
    at = np.asarray(at, np.int64)
    seven = np.uint64(7)
    while len(values):
        more = values >= np.uint64(0x80)
        out[at] = (values & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
        values, at = values[more] >> seven, at[more] + 1


def put_bytes(out: np.ndarray, at: np.ndarray, constant: bytes) -> None:
    """Write ``constant`` at every position of ``at``."""
    for k, byte in enumerate(constant):
        out[at + k] = byte


def put_strings(out: np.ndarray, at: np.ndarray, strings: Strings) -> None:
    """Write string ``i`` at ``out[at[i]:]`` (empty strings write nothing)."""
    put_ranges(out, at, strings.data, strings.starts, strings.lengths)


def put_ranges(out: np.ndarray, at: np.ndarray, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
    """Write ``data[starts[i] : starts[i] + lengths[i]]`` at ``out[at[i]:]`` for every ``i``.

    A few thousand ranges at a time: the index arrays cost 16 bytes per byte copied, so
    they are kept to a few MiB whatever the number of ranges.
    """
    at = np.asarray(at, np.int64)
    ends = np.cumsum(lengths)
    first = 0
    while first < len(lengths):
        done = int(ends[first - 1]) if first else 0
        last = max(int(np.searchsorted(ends, done + _COPY_BYTES, "right")), first + 1)
        _put_ranges(out, at[first:last], data, starts[first:last], lengths[first:last])
        first = last


_COPY_BYTES = 1 << 18  # bytes copied per round of put_ranges


def _put_ranges(out: np.ndarray, at: np.ndarray, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
    total = int(lengths.sum())
    if not total:
        return
    # Byte k of range i goes from starts[i] + k to at[i] + k: one ramp over all bytes,
    # shifted per range.
    before = exclusive_cumsum(lengths)
    ramp = np.arange(total, dtype=np.int64)
    out[np.repeat(at - before, lengths) + ramp] = data[np.repeat(starts - before, lengths) + ramp]
