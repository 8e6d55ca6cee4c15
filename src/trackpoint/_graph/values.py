"""The values of one restore's checkpoint: read in checked batches, files open only while reading.

A restore reads its values while it runs, and again whenever an object it waits for is
created (restore-on-create). The checkpoint's files are open only inside
:meth:`CheckpointValues.reading`; values that must outlive the files (see
:mod:`~trackpoint._graph.kept_values`) are held in memory instead.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.entries import Entry
from trackpoint._format.in_place import InPlace, fits
from trackpoint.errors import CheckpointError, InvalidArgumentError

__all__ = ["CheckpointValues"]

_log = logging.getLogger("trackpoint")
_BATCH_BYTES = 4 << 20


class CheckpointValues:
    """Reads the values of one checkpoint for one restore.

    Attributes:
        reader: The checkpoint's bundle.
        prefix: Its prefix.
        kept: Values read into memory before their files went (see ``kept_values``).
    """

    def __init__(self, reader: BundleReader) -> None:
        self.reader = reader
        self.prefix = reader.prefix
        self.kept: dict[str, Any] = {}
        # Calls reading values right now (see reading()): the files are closed when the last ends.
        self._reads = 0
        self._reads_lock = threading.Lock()

    @functools.cached_property
    def real_prefix(self) -> str:
        """The prefix with links resolved, to recognise the files a save is about to remove (see kept_values)."""
        return os.path.realpath(self.prefix)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Around a call that may read values: the restore call itself, or a restore-on-create.

        The checkpoint's files are open only inside. When the outermost such call ends they
        are closed (see :meth:`BundleReader.release_files`), so nothing stays open while the
        status lives or values wait for objects yet to be created; a later read reopens the
        files, checking that they are still the same. Counted under a lock: objects created on
        two threads may both be reading.
        """
        with self._reads_lock:
            self._reads += 1
        try:
            yield
        finally:
            with self._reads_lock:
                self._reads -= 1
                if self._reads == 0:
                    self.reader.release_files()

    @contextlib.contextmanager
    def many(self, keys: Sequence[str], in_place: InPlace | None = None) -> Iterator[Iterator[Any]]:
        """The values of ``keys`` in order, checksums verified, read batch by batch as they are taken.

        With ``in_place``, a large value it claims is verified in its file and yielded as its
        destination, still holding the old value, for the caller to copy into once every
        value is checked (see :mod:`~trackpoint._format.in_place`). Kept values are in
        memory already, and never read in place.
        """
        kept = self.kept
        if kept and all(key in kept for key in keys):
            yield map(kept.__getitem__, keys)
        elif len(keys) == 1:
            # One tensor, the usual restore-on-create of a variable created on its own: read
            # alone, with the same checks, it skips planning batches for the whole of a
            # restore, which costs ten times the read.
            reader = self.reader
            yield iter([reader.read(keys[0]) if in_place is None else reader.read_one(keys[0], in_place)])
        else:
            # Closed on a failure now rather than when the traceback goes: its read-ahead
            # thread must be done before the files close.
            batches = self.reader.read_batches(keys, _BATCH_BYTES, in_place)
            with contextlib.closing(batches):  # type: ignore[type-var]
                yield itertools.chain.from_iterable(batches)

    def one(self, key: str, out: np.ndarray | None = None) -> Any:
        """The value of ``key``, checksum verified; read into ``out`` when given (see
        :meth:`BundleReader.read`)."""
        kept = self.kept.get(key)
        if kept is None:
            return self.reader.read(key, out)
        if out is None:
            return kept
        np.copyto(out, kept, casting="no")
        return out

    def spec(self, key: str) -> tuple[tuple[int, ...], np.dtype] | None:
        """Shape and numpy dtype of the value of ``key``, from the index; None for strings.

        Raises:
            CheckpointError: The entry is missing, or breaks the rules for reading it.
        """
        kept = self.kept.get(key)
        if kept is not None:
            array = np.asarray(kept)
            return None if array.dtype.kind in "OSU" else (array.shape, array.dtype)
        entry = self.reader.entry(key)
        dtype = self.reader.checked(entry)
        return None if dtype.is_string else (entry.shape, dtype.numpy)

    def region(self, key: str, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int]) -> Any:
        """The part ``bounds`` of the tensor ``key`` of shape ``full_shape`` (see :meth:`BundleReader.read_region`)."""
        kept = self.kept.get(key)
        if kept is None:
            return self.reader.read_region(key, bounds, full_shape)
        if tuple(kept.shape) != tuple(full_shape):
            raise InvalidArgumentError(
                f"{self.prefix}: key {key!r} has shape {list(kept.shape)}, not the full shape {list(full_shape)}",
                path=self.prefix,
                key=key,
            )
        return np.ascontiguousarray(kept[tuple(slice(start, stop) for start, stop in bounds)])

    def region_in_place(
        self, key: str, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int], out: np.ndarray
    ) -> Entry | None:
        """The stored entry that is exactly the region, when it may be read straight into ``out``:
        large enough for that to pay, and fitting it (see :meth:`BundleReader.region_entry`);
        None for a kept value or a small one, before anything is looked up."""
        if key in self.kept or out.nbytes < self.reader.tuning.in_place_bytes:
            return None
        entry = self.reader.region_entry(key, bounds, full_shape)
        return entry if entry is not None and fits(entry, out) else None

    def keep(self, keys: Sequence[str]) -> None:
        """Read the values of ``keys`` into memory, for reads after the files are gone.

        A checkpoint that can no longer be read as it was is left alone: the read that needs
        a value raises then, naming the file and key, as it would have anyway.
        """
        keys = [key for key in keys if key not in self.kept]
        if not keys:
            return
        try:
            with self.reading(), self.many(keys) as read:
                values = list(read)
        except CheckpointError as exc:
            _log.warning(
                "%s: could not keep the values waiting for objects before the checkpoint's files go: %s",
                self.prefix,
                exc,
            )
            return
        self.kept = {**self.kept, **dict(zip(keys, values))}
