"""Reading large tensors straight into the arrays they replace, all or nothing: verify them all, then copy.

Why a module of its own: a restore into existing variables otherwise reads every value into
fresh memory, and on a virtual machine whose host backs pages lazily the first touch of that
memory costs as much as the read (see PERFORMANCE.md, "Restoring in place"). Writing into a
variable's own array instead is only sound when the restore cannot fail halfway, and a
tensor's checksum covers all of it: read into place and checked afterwards, a damaged tensor
would already have destroyed the value it was to replace. So a restore does two passes over
the tensors it reads in place:

1. :meth:`InPlace.verify`, before any value is handed out: every tensor is read, in chunks,
   into one small scratch buffer per thread and checksummed there. The destinations are not
   touched; a damaged or truncated tensor raises as any read would.
2. :meth:`InPlace.copy`, once every value of the restore was read and checked: each tensor is
   read again from the same descriptor, now into its destination, without a checksum.

Both passes split the bytes among ``ReadTuning.read_threads`` threads (file reads and crc32c
release the GIL). Checksumming an ``mmap`` of the data file instead of reading it into scratch
measured a little faster, and is not used: a mapped file truncated meanwhile (``cp`` over it), or
an I/O error of a network file system, raises SIGBUS, which kills the process, where ``pread``
raises (:class:`~trackpoint.errors.DataLossError` for a file cut short). No way of copying measured faster than one
``preadv`` per piece (see PERFORMANCE.md, "Restoring in place", for the alternatives and numbers).
Which arrays may be overwritten (nothing else holds them) is for the caller to say: this module
only knows bytes and arrays. An array offered that :meth:`InPlace.claim` declines (a big-endian
checkpoint, an array of another dtype, shape or layout, one array offered twice) is logged with
the reason at DEBUG on the ``trackpoint.reuse`` logger; its tensor is read into new memory.

The second pass trusts the file not to change after the first: the bytes copied are the bytes
verified unless another process rewrites the data file in place during the restore (trackpoint
never does: a save writes new files and renames them). Such a change is looked for once the
copy is done (the file's size and modification time against those seen before the first
pass) and raises :class:`~trackpoint.errors.DataLossError`; the variables copied into then
hold what the file held, and must be restored again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from trackpoint._format.crc import crc32c, crc32c_combine, unmask
from trackpoint._format.entries import Entry
from trackpoint._format.pread import read_into
from trackpoint._format.runs_in_place import RunsInPlace
from trackpoint._format.slices import readable_key
from trackpoint._format.tensors import numeric_bytes_view
from trackpoint._format.threads import parallel_map
from trackpoint.errors import CheckpointError, DataLossError

if TYPE_CHECKING:
    from trackpoint._format.batch_read import ReadPlan
    from trackpoint._format.bundle_reader import BundleReader

__all__ = ["Destinations", "InPlace", "fits"]

# Why a tensor offered is not read in place, at DEBUG, beside the caches' refusals (PERFORMANCE.md).
_log = logging.getLogger("trackpoint.reuse")

#: Asked with the rows (positions in the keys read) of tensors large enough to read in place,
#: then those of small ones read in runs (see :mod:`.runs_in_place`): the arrays that may be
#: overwritten with them, by row (rows left out are read as usual). A small row is only worth
#: it for memory whose owner would copy its value into it anyway (a tensor owner's), not for
#: a variable's array, which a variable replaces at no cost by the view read.
Destinations = Callable[[Sequence[int], Sequence[int]], dict[int, np.ndarray]]

# One piece of the work of a pass: (index of the tensor among those read in place, first byte, end).
_Piece = tuple[int, int, int]


def fits(entry: Entry, out: np.ndarray) -> bool:
    """Whether ``entry`` may be read straight into ``out``: a plain numeric tensor of exactly its
    dtype and shape, and an aligned, C-contiguous array over memory of its own size.

    Whether that memory may be overwritten (a variable's own array that nothing else holds,
    a framework tensor's storage) is for whoever offers it to say."""
    dtype = entry.dtype
    return (
        dtype is not None
        and not dtype.is_string
        and not entry.is_sliced
        and entry.size > 0
        and out.dtype == dtype.numpy
        and out.shape == entry.shape
        and out.nbytes == entry.size
        and out.flags.c_contiguous
        and out.flags.aligned
    )


class InPlace:
    """The tensors of one restore read into existing arrays; see the module docstring.

    A read plan (or a single read) offers the rows of its large tensors to :meth:`claim`,
    which asks ``destinations`` for arrays to overwrite; those rows are then verified by
    :meth:`verify` before their values are handed out, as their destination arrays
    themselves, still holding the old values. The caller checks every value of the restore,
    then calls :meth:`copy`.

    Large tensors (``ReadTuning.in_place_bytes`` or more) are offered; small ones, read in
    runs, only with ``small``: below that size, reading into fresh memory costs a variable less
    than two passes (see PERFORMANCE.md), and only an owner that copies every value anyway
    gains (see :mod:`.runs_in_place`).

    Args:
        destinations: Which arrays may be overwritten (see :data:`Destinations`).
        small: Whether to offer small tensors too (a restore into some tensor owner).

    Attributes:
        entries: Row -> entry of each large tensor claimed, verified once :meth:`verify` returns.
    """

    def __init__(self, destinations: Destinations, small: bool = False) -> None:
        self.entries: dict[int, Entry] = {}
        self.small = small
        self._destinations = destinations
        self._reader: BundleReader | None = None
        self._runs: RunsInPlace | None = None  # the small tensors claimed
        self._seen: dict[int, tuple[int, int]] = {}  # shard id -> its file's (size, mtime) at verify

    @property
    def claimed(self) -> bool:
        """Whether any tensor is to be read in place."""
        return bool(self.entries) or self._runs is not None

    def claim(
        self, reader: BundleReader, offered: dict[int, Entry], plan: ReadPlan | None = None, small: Sequence[int] = ()
    ) -> dict[int, np.ndarray]:
        """The destination of each row of ``offered`` and of ``small`` to be read in place: row -> array.

        ``offered`` holds large entries that passed :meth:`BundleReader.checked`; ``small``,
        rows that ``plan`` reads in runs. A row whose destination does not fit its entry
        (another dtype or shape: the usual read and check then raise the precise error) is
        left to the usual read, as is an array offered for two rows.
        """
        if not (offered or small):
            return {}
        if reader.big_endian:
            _log.debug(
                "in place: %s is big-endian, so its %d tensors offered are read into new memory (their bytes are "
                "swapped after the read)",
                reader.prefix,
                len(offered) + len(small),
            )
            return {}
        outs = self._destinations(list(offered), small)
        counts: dict[int, int] = {}
        for out in outs.values():
            counts[id(out)] = counts.get(id(out), 0) + 1
        taken = {}
        runs = {}
        for row, out in outs.items():
            if counts[id(out)] != 1:
                continue
            entry = offered.get(row)
            if entry is not None:
                if fits(entry, out):
                    taken[row] = out
                    self.entries[row] = entry
            elif plan is not None and plan.fits(row, out):
                taken[row] = runs[row] = out
        if len(taken) < len(outs):
            _log.debug(
                "in place: %d of the %d arrays offered are not read into but replaced by new memory: each is offered "
                "for two tensors, or is not of its tensor's dtype, shape or layout (see fits)",
                len(outs) - len(taken),
                len(outs),
            )
        if taken:
            self._reader = reader
        if runs and plan is not None:
            self._runs = RunsInPlace(reader, plan.runs_of(list(runs)), plan.crcs, plan.keys, runs)
        return taken

    # -- the two passes ---------------------------------------------------------------------

    def _pieces(self, reader: BundleReader, entries: list[Entry]) -> list[list[_Piece]]:
        """The tensors' bytes cut into one contiguous share per thread.

        Shares of equal size, so both threads finish together; a tensor cut between two
        shares costs one :func:`crc32c_combine` (tens of microseconds) in the first pass, and
        cutting only there keeps that to one per thread.
        """
        total = sum(entry.size for entry in entries)
        threads = max(1, min(reader.tuning.read_threads, total // reader.tuning.chunk_bytes))
        step = -(-total // threads)
        shares: list[list[_Piece]] = [[] for _ in range(threads)]
        done = 0  # bytes of the tensors before this one
        for index, entry in enumerate(entries):
            lo = 0
            while lo < entry.size:
                share = min((done + lo) // step, threads - 1)
                hi = min(entry.size, (share + 1) * step - done)
                shares[share].append((index, lo, hi))
                lo = hi
            done += entry.size
        return [share for share in shares if share]

    def verify(self) -> None:
        """Read every claimed tensor into scratch memory and verify its checksum (the first pass).

        Raises:
            DataLossError: A checksum does not match, or a data file ends early.
        """
        reader = self._reader
        if reader is None:
            return
        if self._runs is not None:
            self._runs.verify(lambda shard_id, fd: self._seen.setdefault(shard_id, reader.file_state(shard_id, fd)))
        if not self.entries:
            return
        entries = list(self.entries.values())
        fds = [reader.entry_fd(entry) for entry in entries]
        for entry, fd in zip(entries, fds):
            self._seen[entry.shard_id] = reader.file_state(entry.shard_id, fd)
        ended = [functools.partial(reader.ended_early, entry.shard_id, entry.key) for entry in entries]
        chunk_bytes = reader.tuning.chunk_bytes

        def checksum(share: list[_Piece]) -> list[int]:
            # One scratch buffer per thread, reused for every chunk: it stays in the CPU's
            # cache, where its checksum is cheap, and no new memory is touched.
            scratch = memoryview(bytearray(chunk_bytes))
            crcs = []
            for index, lo, hi in share:
                entry, crc = entries[index], 0
                for start in range(lo, hi, chunk_bytes):
                    stop = min(start + chunk_bytes, hi)
                    buf = scratch[: stop - start]
                    read_into(fds[index], buf, entry.offset + start, ended[index])
                    crc = crc32c(buf, crc)
                crcs.append(crc)
            return crcs

        shares = self._pieces(reader, entries)
        crcs: list[int | None] = [None] * len(entries)
        for share, share_crcs in zip(shares, parallel_map(checksum, shares, len(shares))):
            for (index, lo, hi), part in zip(share, share_crcs):
                before = crcs[index]
                crcs[index] = part if before is None else crc32c_combine(before, part, hi - lo)
        for entry, total in zip(entries, crcs):
            if total != unmask(entry.crc32c):
                raise reader.checksum_mismatch(entry.shard_id, entry.key)

    def copy(self, outs: dict[int, np.ndarray]) -> None:
        """Read the verified tensors of ``outs`` (row -> array, a subset of :attr:`entries`) into
        their arrays (the second pass), which must be read-only arrays that nothing else holds,
        and the small tensors claimed into theirs.

        Raises:
            DataLossError: A data file changed since :meth:`verify` (see the module docstring).
        """
        reader = self._reader
        if reader is None:
            return
        runs, self._runs = self._runs, None  # and with it, the last reference to their destinations
        if runs is not None:
            self._copy_runs(reader, runs, len(runs) + len(outs))
        if outs:
            self._copy_large(reader, outs)

    def _copy_runs(self, reader: BundleReader, runs: RunsInPlace, count: int) -> None:
        """The second pass of the small tensors claimed (``count`` tensors in this call in all)."""
        try:
            runs.copy()
        except CheckpointError as exc:  # the file ended early: it was cut short since verify
            raise _changed(reader, exc.key or "", count) from exc
        for shard_id, (fd, key) in runs.files.items():
            if reader.file_state(shard_id, fd) != self._seen.get(shard_id):
                raise _changed(reader, key, count)

    def _copy_large(self, reader: BundleReader, outs: dict[int, np.ndarray]) -> None:
        """The second pass of the large tensors of ``outs``."""
        rows = list(outs)
        entries = [self.entries[row] for row in rows]
        fds = [reader.entry_fd(entry) for entry in entries]
        ended = [functools.partial(reader.ended_early, entry.shard_id, entry.key) for entry in entries]
        arrays = [outs[row] for row in rows]
        frozen = [array for array in arrays if not array.flags.writeable]  # a variable's, read-only again after
        for array in frozen:
            array.flags.writeable = True  # allowed: its memory was offered for this (see fits)
        views = [numeric_bytes_view(array) for array in arrays]

        def read(share: list[_Piece]) -> None:
            for index, lo, hi in share:
                read_into(fds[index], views[index][lo:hi], entries[index].offset + lo, ended[index])

        shares = self._pieces(reader, entries)
        try:
            parallel_map(read, shares, len(shares))
        except CheckpointError as exc:  # the file ended early: it was cut short since verify
            damaged = next((entry for entry in entries if entry.key == exc.key), entries[0])
            raise _changed(reader, damaged.key, len(entries)) from exc
        finally:
            for view in views:
                view.release()
            for array in frozen:
                array.flags.writeable = False
        for fd, entry in zip(fds, entries):
            if reader.file_state(entry.shard_id, fd) != self._seen.get(entry.shard_id):
                raise _changed(reader, entry.key, len(entries))

    def read_fresh(self, row: int) -> np.ndarray:
        """A claimed tensor read into new memory, checksum verified: for a destination that
        became shared between :meth:`claim` and :meth:`copy`."""
        entry = self.entries[row]
        return self._reader.read_checked(entry, entry.dtype)  # type: ignore[union-attr,arg-type,return-value]


def _changed(reader: BundleReader, key: str, count: int) -> DataLossError:
    """The error for the data file of ``key`` written to between the two passes (see the module docstring)."""
    path = reader.data_path(reader.entry(key).shard_id)
    return DataLossError(
        f"{path}: the data file changed while key {readable_key(key)!r} was being restored into an existing "
        f"variable; the {count} variable(s) restored in place in this call now hold whatever the files held: "
        "restore again from a checkpoint nothing writes to",
        path=path,
        key=key,
    )
