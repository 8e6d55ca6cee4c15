"""Small tensors, fetched in runs, restored straight into memory their owners gave: verify, then scatter.

Why: a restore of many small tensors reads them in runs (:mod:`.batch_read`) and hands out
read-only views of the bytes read, which are held until every value of the restore was
checked. For a ``tp.Variable`` that costs nothing extra: the variable takes the view as its
new array. A tensor owner (``trackpoint.torch``) copies every value into its own memory, so
there the held runs are a second copy of the whole state: 57 MiB for a torch model of 20,000
small parameters with AdamW state, beside the 60 MiB it replaces. With the owner's memory
offered for them, those tensors take the two passes of :mod:`.in_place` instead, with at most
one run (``ReadTuning.run_bytes``) in scratch memory at any time:

1. :meth:`RunsInPlace.verify`: each run is read into one scratch buffer and every tensor of
   it checked against its crc. Nothing is written; a damaged tensor raises as any read does.
2. :meth:`RunsInPlace.copy`, once every value of the restore was checked: each run is read
   again with one ``preadv`` whose buffers are the destinations themselves, back to back as
   the tensors lie in the file (the bytes between two tensors go to a scratch buffer), so
   nothing is copied twice.

As in :mod:`.in_place`, a change of a data file between the passes is detected (its size and
modification time) and raises :class:`~trackpoint.errors.DataLossError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from trackpoint._format.crc import crc32c
from trackpoint._format.pread import read_into_all
from trackpoint._format.tensors import numeric_bytes_view

if TYPE_CHECKING:
    from trackpoint._format.batch_read import Run
    from trackpoint._format.bundle_reader import BundleReader

__all__ = ["RunsInPlace"]


class RunsInPlace:
    """The small tensors of one read plan claimed for reading in place; see the module docstring.

    Args:
        reader: The checkpoint's reader.
        runs: The runs that fetch the claimed tensors (and only them).
        crcs: The unmasked crc32c of each row of the plan.
        keys: The plan's keys, by row (for errors).
        outs: Row -> the destination of each claimed tensor.

    Attributes:
        files: Shard id -> (descriptor, a key in it) of each data file read, once verified.
    """

    def __init__(
        self,
        reader: BundleReader,
        runs: list[Run],
        crcs: np.ndarray,
        keys: Sequence[str],
        outs: dict[int, np.ndarray],
    ) -> None:
        self._reader = reader
        self._runs = runs
        self._crcs = crcs
        self._keys = keys
        self._outs = outs
        self.files: dict[int, tuple[int, str]] = {}

    def __len__(self) -> int:
        return len(self._outs)

    def verify(self, seen: Callable[[int, int], object]) -> None:
        """Read every run into scratch memory and check each tensor's crc (the first pass);
        ``seen(shard_id, fd)`` is told of each file, before it is first read.

        Raises:
            DataLossError: A checksum does not match, or a data file ends early.
        """
        scratch = memoryview(bytearray(max((run.length for run in self._runs), default=0)))
        files = self.files
        for run in self._runs:
            if run.shard_id not in files:
                files[run.shard_id] = (run.fd, self._keys[int(run.rows[0])])
                seen(run.shard_id, run.fd)
            view = scratch[: run.length]
            self._fill(run, [view])
            crcs = self._crcs[run.rows].tolist()
            for row, lo, hi, crc in zip(run.rows.tolist(), run.starts.tolist(), run.ends.tolist(), crcs):
                if crc32c(view[lo:hi]) != crc:
                    raise self._reader.checksum_mismatch(run.shard_id, self._keys[row])

    def copy(self) -> None:
        """Read every run again, now into the destinations (the second pass).

        Raises:
            CheckpointError: A data file ends early (it was cut short since :meth:`verify`).
        """
        outs = self._outs
        gap_bytes = 0
        for run in self._runs:
            if len(run.starts) > 1:
                gap_bytes = max(gap_bytes, int((run.starts[1:] - run.ends[:-1]).max()))
        gap = memoryview(bytearray(max(1, gap_bytes)))
        scratch: memoryview | None = None
        for run in self._runs:
            rows, starts, ends = run.rows.tolist(), run.starts.tolist(), run.ends.tolist()
            if len(rows) > 1 and bool((run.starts[1:] < run.ends[:-1]).any()):
                # Tensors over shared bytes (an index may say so): no one read can scatter them.
                if scratch is None or len(scratch) < run.length:
                    scratch = memoryview(bytearray(run.length))
                view = scratch[: run.length]
                self._fill(run, [view])
                for row, lo, hi in zip(rows, starts, ends):
                    with numeric_bytes_view(outs[row]) as out:
                        out[:] = view[lo:hi]
                continue
            buffers: list[memoryview] = []
            end = 0
            for row, lo, hi in zip(rows, starts, ends):
                if lo > end:
                    buffers.append(gap[: lo - end])
                buffers.append(numeric_bytes_view(outs[row]))
                end = hi
            try:
                self._fill(run, buffers)
            finally:
                for buffer in buffers:
                    buffer.release()

    def _fill(self, run: Run, buffers: list[memoryview]) -> None:
        """Fill ``buffers``, back to back, with the run's bytes (from its first on).

        Raises:
            DataLossError: The file ends before the run does.
        """
        read_into_all(
            run.fd,
            buffers,
            run.first,
            functools.partial(self._reader.ended_early, run.shard_id, self._keys[int(run.rows[0])]),
        )
