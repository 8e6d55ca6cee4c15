"""Reading many tensors at once: decode and check every entry together, then fetch them in few reads.

A :class:`ReadPlan` decodes the entries of all keys as numpy columns
(:mod:`.entry_columns`) and checks them with the vectorized rules of :mod:`.entry_rules`.
"Fast" rows are the small plain numeric ones found valid and inside their file: neighbours
in a shard are fetched together, in runs (:class:`Run`), and handed out as read-only views
of the bytes read. Every other row (strings, slices, large tensors, big-endian files,
anything unusual or damaged) is checked one by one by the scalar rules, which raise the
precise error, and is read, as checked then, by :meth:`BundleReader.read_checked` when its
batch comes. A loader fetches each batch's runs: :class:`SerialLoader` when its batch is reached,
:class:`OverlappingLoader` on a helper thread while the caller works on the batch before.
With an :class:`~trackpoint._format.in_place.InPlace`, large rows whose destination it gives
are not read but verified in their files before the first batch, and handed out as their
destinations (still holding the old values), to be copied into once the caller has checked
every value.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from trackpoint._format import entry_rules
from trackpoint._format.crc import crc32c, crc32c_of_run, unmask_all
from trackpoint._format.dtypes import NUMPY_BY_ENUM, DType
from trackpoint._format.entries import Entry
from trackpoint._format.entry_columns import distinct
from trackpoint._format.entry_rules import Rows
from trackpoint._format.pread import read_bytes
from trackpoint._format.threads import Background

if TYPE_CHECKING:
    from trackpoint._format.bundle_reader import BundleReader
    from trackpoint._format.in_place import InPlace

__all__ = ["Loader", "OverlappingLoader", "ReadPlan", "Run", "SerialLoader"]

_SLICED = 1 << 62  # what a sliced tensor counts for when batching: a batch of its own
# Runs of fewer alike tensors are checked one call each: that costs less than the tables of the
# combined check (about 60 us for each level of its tree, once per tensor size in a process).
_ALIKE_RUN = 1024


@dataclass(frozen=True)
class Run:
    """One read of neighbouring small tensors: where it lies, and each tensor's row and place in it."""

    shard_id: int
    fd: int
    first: int
    length: int
    rows: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


class Waiting(Protocol):
    """Work under way on another thread (:class:`~trackpoint._format.threads.Background`)."""

    def result(self) -> list[bytes]: ...

    def join(self) -> None: ...


Spawn = Callable[[Callable[[], list[bytes]]], Waiting]


def _spawn_reader(function: Callable[[], list[bytes]]) -> Waiting:
    return Background(function, "trackpoint-read")


class ReadPlan:
    """Keys to read, decoded and checked all at once; see the module docstring.

    Raises (on construction):
        NotFoundError: A key is not in the checkpoint, or a data shard is missing.
        DataLossError, InvalidArgumentError: An entry fails a rule of :mod:`.entry_rules`.
    """

    def __init__(self, reader: BundleReader, keys: Sequence[str], in_place: InPlace | None = None) -> None:
        self.reader = reader
        self.keys = keys
        self.tuning = reader.tuning
        columns = self.columns = reader.columns(keys)
        self.fast = self._fast_rows(Rows.of(columns, keys))
        self.batch_sizes = columns.size.copy()
        self.crcs = unmask_all(columns.crc32c)
        # Read only for fast rows, whose dtype the rules found readable (so in range).
        self.dtypes = NUMPY_BY_ENUM[np.clip(columns.dtype, 0, len(NUMPY_BY_ENUM) - 1)].tolist()
        # The other rows, decoded and checked one by one now (which raises the precise error of
        # the rule a row fails), and read with what the check gave when their batch comes.
        self.slow: dict[int, tuple[Entry, DType]] = {}
        for row in np.flatnonzero(~self.fast).tolist():
            entry = reader.entry(keys[row])
            self.slow[row] = (entry, reader.checked(entry))
            self.batch_sizes[row] = entry.size if not entry.is_sliced else _SLICED
        # Every row is checked, so what they will read is known: at a URL it is fetched together
        # now. (A sliced tensor's bytes are its slices', under other keys: read when it is.)
        sizes = columns.size
        sliced = [row for row, (entry, _) in self.slow.items() if entry.is_sliced]
        if sliced:
            sizes = sizes.copy()
            sizes[sliced] = 0
        reader.expect(keys, columns.shard_id, columns.offset, sizes)
        # Rows read in place (see in_place): their destinations, handed out as their values.
        self.in_place = in_place
        self.outs: dict[int, np.ndarray] = {}
        if in_place is not None:
            large = np.flatnonzero(~self.fast & (columns.size >= self.tuning.in_place_bytes)).tolist()
            small = np.flatnonzero(self.fast).tolist() if in_place.small else []
            if large or small:
                self.outs = in_place.claim(reader, {row: self.slow[row][0] for row in large}, self, small)
                taken = np.fromiter(self.outs, np.int64, len(self.outs))
                for row in large:
                    if row in self.outs:
                        del self.slow[row]
                self.fast[taken] = False  # so no run fetches it: it is handed out as its destination
                self.batch_sizes[taken] = 0  # nothing of it is held in memory

    def _fast_rows(self, rows: Rows) -> np.ndarray:
        """Rows read in runs: small, plain, numeric, of a little-endian file, and passing every rule."""
        if self.reader.big_endian:
            return np.zeros(len(rows.keys), bool)
        small = (rows.itemsize > 0) & (rows.columns.size < self.tuning.parallel_read_bytes)
        return entry_rules.passing(rows, small, self.reader)

    @functools.cached_property
    def shapes(self) -> list[tuple[int, ...]]:
        """Each row's shape. Only runs of unlike tensors need them all (see :meth:`shape`)."""
        return self.columns.shapes()

    def shape(self, row: int) -> tuple[int, ...]:
        columns = self.columns
        return tuple(columns.dims[row, : columns.ndim[row]].tolist())

    def uniform(self, rows: np.ndarray) -> bool:
        """Whether these rows are tensors of one dtype and one shape, of rank 1 or more."""
        columns = self.columns
        head = rows[0]
        return bool(
            columns.ndim[head] > 0
            and (columns.dtype[rows] == columns.dtype[head]).all()
            and (columns.ndim[rows] == columns.ndim[head]).all()
            and (columns.dims[rows] == columns.dims[head]).all()
        )

    def fits(self, row: int, out: np.ndarray) -> bool:
        """Whether the small tensor of ``row`` may be read straight into ``out``, as
        :func:`~trackpoint._format.in_place.fits` says of a large one (and ``out`` is writable)."""
        flags = out.flags
        return bool(
            self.fast[row]
            and out.dtype == self.dtypes[row]
            and out.shape == self.shapes[row]
            and out.nbytes == self.columns.size[row]
            and flags.c_contiguous
            and flags.aligned
            and flags.writeable
        )

    # -- batches ------------------------------------------------------------------------

    def batches(self, batch_bytes: int) -> list[tuple[int, int]]:
        """``(start, stop)`` row ranges of at most ``batch_bytes`` (or one larger row)."""
        # Greedy, as a loop adding rows while they fit would do, one batch per step: a row
        # larger than a batch fills one whatever its size, so sizes are capped (and the
        # prefix sums cannot overflow).
        sizes = np.clip(self.batch_sizes, 0, batch_bytes + 1)
        ends = np.concatenate(([0], np.cumsum(sizes)))
        start, count = 0, len(sizes)
        found = []
        while start < count:
            stop = max(start + 1, int(np.searchsorted(ends, ends[start] + batch_bytes, "right")) - 1)
            found.append((start, stop))
            start = stop
        return found

    def loader(self, batch_bytes: int, spawn: Spawn = _spawn_reader) -> Loader:
        """The loader for batches of at most ``batch_bytes``: the one place the choice is made.

        Reading ahead pays when a batch holds many tensors, whose checks and hand-out keep
        the caller busy while the helper reads (on a first restore that read spends much of
        its time faulting in new memory, without the GIL); batches are then half of
        ``batch_bytes`` so that two fit. With a few larger tensors there is little to
        overlap, and a thread and the hand-overs of the GIL per batch cost more than they
        save. ``spawn`` starts a read ahead (tests pass their own).
        """
        batches = self.batches(batch_bytes)
        if len(self.keys) >= self.tuning.read_ahead_rows * len(batches):
            return OverlappingLoader(self, self.batches(max(1, batch_bytes // 2)), batch_bytes, spawn)
        return SerialLoader(self, batches)

    def values(self, loader: Loader) -> Iterator[list[Any]]:
        """The values of every key, in order, one list per batch of ``loader``."""
        try:
            if self.in_place is not None and self.outs:
                self.in_place.verify()  # every tensor read in place, before any value is handed out
            for index, (start, stop) in enumerate(loader.batches):
                runs, fetched = loader.load(index)
                yield self.finish(start, stop, runs, fetched)
        finally:
            loader.close()  # also when the caller stops early: no thread is left reading

    # -- runs ---------------------------------------------------------------------------

    def runs(self, start: int, stop: int) -> list[Run]:
        """The reads that fetch the small tensors of rows ``start:stop``."""
        return self.runs_of(np.flatnonzero(self.fast[start:stop]) + start)

    def runs_of(self, rows: np.ndarray | list[int]) -> list[Run]:
        """The reads that fetch the small tensors of ``rows`` (and no others)."""
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return []
        shards = self.columns.shard_id[rows]
        return [run for shard_id in distinct(shards) for run in self._plan_runs(shard_id, rows[shards == shard_id])]

    def _plan_runs(self, shard_id: int, rows: np.ndarray) -> list[Run]:
        """Group the small tensors ``rows`` of one shard into as few reads as possible.

        Tensors are taken in file order and grouped into runs: neighbours less than
        ``run_gap`` apart, spanning at most ``run_bytes``. Each run is one read.
        """
        columns, run_gap, run_bytes = self.columns, self.tuning.run_gap, self.tuning.run_bytes
        order = rows[np.argsort(columns.offset[rows], kind="stable")]
        starts = columns.offset[order]
        ends = starts + columns.size[order]
        reach = np.maximum.accumulate(ends)  # the end of the run so far, whatever the order of sizes
        bounds = [0, *(np.flatnonzero(starts[1:] - reach[:-1] > run_gap) + 1).tolist(), len(order)]
        spans: list[tuple[int, int]] = []
        for a, b in itertools.pairwise(bounds):
            if reach[b - 1] - starts[a] <= run_bytes:
                spans.append((a, b))
                continue
            for i in range(a, b):  # too long for one read: split where it grows past run_bytes
                if i == a or reach[i] - starts[spans[-1][0]] > run_bytes:
                    spans.append((i, i + 1))
                else:
                    spans[-1] = (spans[-1][0], i + 1)
        fd = self.reader.shard_fd(
            shard_id, self.keys[int(order[0])], [(int(starts[a]), int(reach[b - 1])) for a, b in spans]
        )[0]
        runs = []
        for a, b in spans:
            first = int(starts[a])
            runs.append(
                Run(shard_id, fd, first, int(reach[b - 1]) - first, order[a:b], starts[a:b] - first, ends[a:b] - first)
            )
        return runs

    def fetch(self, runs: list[Run]) -> list[bytes]:
        """The bytes of ``runs``, unchecked: nothing but file reads, so a helper thread may do it."""
        return [self._read_run(run) for run in runs]

    def _read_run(self, run: Run) -> bytes:
        """A run's bytes, unchecked (see :meth:`_hand_out`)."""
        # Immutable bytes, so the arrays handed out are read-only views from the start.
        ended = functools.partial(self.reader.ended_early, run.shard_id, self.keys[int(run.rows[0])])
        return read_bytes(run.fd, run.length, run.first, ended)

    def finish(self, start: int, stop: int, runs: list[Run], fetched: list[bytes]) -> list[Any]:
        """The values of rows ``start:stop``, in order: the fetched ones checked, the others read now."""
        reader = self.reader
        results: list[Any] = [None] * (stop - start)
        for row in (np.flatnonzero(~self.fast[start:stop]) + start).tolist():
            slow = self.slow.pop(row, None)
            # Popped as handed out: the plan keeps no reference that would keep a destination shared.
            results[row - start] = reader.read_checked(*slow) if slow is not None else self.outs.pop(row)
        for run, buf in zip(runs, fetched):
            self._hand_out(run, buf, results, start)
        return results

    def _hand_out(self, run: Run, buf: bytes, results: list[Any], base: int) -> None:
        """Verify each tensor of a run against its crc and place its array in ``results``.

        At least :data:`_ALIKE_RUN` tensors of one size back to back (a model's many
        same-shaped variables) are verified together: the crc of the whole run against the crc their own crcs combine to
        (:func:`~trackpoint._format.crc.crc32c_of_run`). Bytes that fail a tensor's crc fail
        that one too (the combination multiplies the tensor's error by a power of x, never 0
        modulo the polynomial); only errors in several tensors that cancel out would pass it,
        as likely as a 32-bit crc passing damage by chance. Where it fails, each tensor is
        checked, to name the first that fails.
        """
        ndarray, dtypes = np.ndarray, self.dtypes
        view = memoryview(buf)
        run_rows = run.rows
        row_list, los = run_rows.tolist(), run.starts.tolist()
        count = len(row_list)
        crcs = self.crcs[run_rows]
        length = int(run.ends[0] - run.starts[0])
        back_to_back = count > 1 and bool((run.starts[1:] == run.ends[:-1]).all())
        alike = count >= _ALIKE_RUN and back_to_back and bool((run.ends - run.starts == length).all())
        if not (alike and crc32c(view[los[0] : int(run.ends[-1])]) == crc32c_of_run(crcs, length)):
            for row, lo, hi, crc in zip(row_list, los, run.ends.tolist(), crcs.tolist()):
                if crc32c(view[lo:hi]) != crc:
                    raise self.reader.checksum_mismatch(run.shard_id, self.keys[row])
        head = row_list[0]
        if back_to_back and self.uniform(run_rows):
            # Back to back and alike (a model's many same-shaped variables): one array over
            # the run, whose rows are the tensors, costs less than one array per tensor.
            arrays = list(ndarray((count, *self.shape(head)), dtypes[head], buf, los[0]))
        else:
            shapes = self.shapes
            arrays = [ndarray(shapes[row], dtypes[row], buf, lo) for row, lo in zip(row_list, los)]
        for row, array in zip(row_list, arrays):
            results[row - base] = array


class Loader(Protocol):
    """Fetches the runs of a plan's batches, in order."""

    @property
    def batches(self) -> list[tuple[int, int]]:
        """``(start, stop)`` row ranges, one per batch."""
        ...

    def load(self, index: int) -> tuple[list[Run], list[bytes]]:
        """The runs of batch ``index`` and their bytes (batches are loaded in order)."""
        ...

    def close(self) -> None:
        """Stop: wait for any read under way."""
        ...


class SerialLoader:
    """Fetches each batch's runs when its batch is reached, on the caller's thread."""

    def __init__(self, plan: ReadPlan, batches: list[tuple[int, int]]) -> None:
        self.plan = plan
        self.batches = batches

    def load(self, index: int) -> tuple[list[Run], list[bytes]]:
        runs = self.plan.runs(*self.batches[index])
        return runs, self.plan.fetch(runs)

    def close(self) -> None:
        pass


class OverlappingLoader:
    """Fetches the next batch's runs on a helper thread while the caller works on this batch.

    Only when both batches fit in ``batch_bytes`` together: what is read and not yet
    consumed never passes the bound.
    """

    def __init__(self, plan: ReadPlan, batches: list[tuple[int, int]], batch_bytes: int, spawn: Spawn) -> None:
        self.plan = plan
        self.batches = batches
        self.batch_bytes = batch_bytes
        self._spawn = spawn
        self._totals = [int(plan.batch_sizes[start:stop].sum()) for start, stop in batches]
        self._next = plan.runs(*batches[0]) if batches else []  # the runs of the batch to load next
        self._ahead: Waiting | None = None  # their bytes, when being read already

    def load(self, index: int) -> tuple[list[Run], list[bytes]]:
        runs, ahead = self._next, self._ahead
        self._ahead = None
        fetched = self.plan.fetch(runs) if ahead is None else ahead.result()
        if index + 1 < len(self.batches):
            self._next = self.plan.runs(*self.batches[index + 1])
            if self._next and self._totals[index] + self._totals[index + 1] <= self.batch_bytes:
                self._ahead = self._spawn(functools.partial(self.plan.fetch, self._next))
        return runs, fetched

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None
