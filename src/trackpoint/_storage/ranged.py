"""One object at a URL as a reader holds it: a local sparse copy, filled by ranged GETs as bytes are needed.

Every read path of the format layer works on a file descriptor with ``pread`` (runs, large
tensors in parallel, in-place restores). So a data object is mirrored in a temporary file of
its size, unlinked as soon as it is made, and only the byte ranges a reader asks for are
fetched into it before it reads them: a reader never reads a range that was not fetched.

- Ranges asked for together are merged where less than :data:`MAX_GAP` apart (neighbouring
  tensors cost one request) into requests of at most :data:`MAX_BLOCK` bytes, at most
  :data:`IN_FLIGHT` of them at a time, written to the copy :data:`GROUP_BYTES` at a time (so
  memory stays bounded whatever the object's size).
- When what is missing of a request covers most of the object (:data:`WHOLE_FRACTION`), the
  object is downloaded whole instead, by the backend's own streamed download (one GET on
  s3fs; servers such as moto read the whole object for every ranged GET).
- A reader that will want most of the object says so early (:meth:`RangedObject.prefetch`):
  the whole download runs on a helper thread while the reader works on other things, and
  every fetch waits for it.
- The object's version (ETag, generation) is read before the first fetch. It is not read
  again after each: every byte is checked against the index's checksums, so bytes of
  another version fail them, and the reader then asks :meth:`RangedObject.changed` to tell
  a replaced object from a damaged one. A whole copy is checked against the version
  first: by the version its GET's answer gave (S3, up to ``fsspec_io.WHOLE_IN_MEMORY``), else,
  when it would replace ranges already read, by asking again, since a reader may have
  checked those bytes in the copy and not read them out yet (an in-place restore).

Checksums are verified by the reader on the local bytes, as for any file.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import threading
from collections.abc import Iterable

from trackpoint._storage import fsspec_io, providers
from trackpoint._storage.store_errors import UNANSWERED, call
from trackpoint.errors import CheckpointError, DataLossError, PermissionDeniedError

__all__ = ["GROUP_BYTES", "IN_FLIGHT", "MAX_BLOCK", "MAX_GAP", "WHOLE_FRACTION", "RangedObject"]

_log = logging.getLogger("trackpoint")

MAX_GAP = 1 << 20
MAX_BLOCK = 16 << 20
IN_FLIGHT = 8
GROUP_BYTES = 64 << 20
WHOLE_FRACTION = 0.5

Span = tuple[int, int]  # [start, end) in the object


def _merge(spans: Iterable[Span], gap: int) -> list[Span]:
    """Sorted spans, overlapping or less than ``gap`` apart ones joined."""
    merged: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start - merged[-1][1] <= gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _subtract(spans: list[Span], have: list[Span]) -> list[Span]:
    """The parts of sorted disjoint ``spans`` not in sorted disjoint ``have``."""
    missing: list[Span] = []
    i = 0
    for start, end in spans:
        while i < len(have) and have[i][1] <= start:
            i += 1
        j, cursor = i, start
        while j < len(have) and have[j][0] < end:
            if have[j][0] > cursor:
                missing.append((cursor, have[j][0]))
            cursor = max(cursor, have[j][1])
            j += 1
        if cursor < end:
            missing.append((cursor, end))
    return missing


def _blocks(spans: list[Span], size: int) -> list[Span]:
    """``spans`` cut into requests of at most :data:`MAX_BLOCK` bytes."""
    return [(s, min(s + size, end)) for start, end in spans for s in range(start, end, size)]


class RangedObject:
    """The object at ``url`` (``what`` names it in messages), fetched into a local copy range by range.

    Thread-safe. :meth:`ensure` fetches; :attr:`fd` is the copy to ``pread`` once a range is
    ensured; :meth:`close` frees it.

    Raises (on construction):
        NotFoundError: No object is at ``url``.
    """

    def __init__(self, url: str, what: str) -> None:
        self.url = url
        self.what = what
        self.stat = fsspec_io.stat_object(url, what)
        self.size = self.stat.st_size
        self.fd = -1
        self._stamp = 0
        self.requests = 0  # ranged GETs made (and whole downloads), for tests and benchmarks
        self._have: list[Span] = []
        self._lock = threading.Lock()
        self._prefetch: threading.Event | None = None  # set when a download begun by prefetch() ends

    def ensure(self, spans: Iterable[Span] | None) -> None:
        """Fetch the ranges of ``spans`` not fetched yet (None: the whole object).

        Raises:
            DataLossError: A request failed, or the object changed since it was first read.
        """
        size = self.size
        wanted = [(0, size)] if spans is None else [(max(0, a), min(b, size)) for a, b in spans]
        while True:
            with self._lock:
                # All of it held (downloaded whole): no need to sort the thousands of spans asked for.
                missing = [] if self.whole else _subtract(_merge(wanted, MAX_GAP), self._have)
                if not missing:
                    if self.fd < 0:
                        self._open_sparse()
                    return
                pending = self._prefetch
                if pending is None:
                    if sum(b - a for a, b in missing) >= WHOLE_FRACTION * size:
                        self._install(*self._download_whole())
                        return
                    if self.fd < 0:
                        self._open_sparse()
                    self._fetch(missing)
                    self._have = _merge([*self._have, *missing], 0)
                    return
            # Even a few ranges wait for the whole download rather than fetch beside it: two
            # requests at once to one server slowed each other by more than they overlapped
            # (the object graph's range took 4x as long beside the download, the download 3x).
            pending.wait()  # then look again: a failed prefetch leaves the ranges missing

    @property
    def whole(self) -> bool:
        """Whether every byte of the object is in the local copy."""
        return self._have == [(0, self.size)]

    def prefetch(self) -> None:
        """Start downloading the whole object on a helper thread, for a reader about to want most of it.

        Meanwhile :meth:`ensure` waits for the download. A prefetch that fails is forgotten
        (the next :meth:`ensure` fetches as if none had been made); one that ends after
        :meth:`close` frees its copy.
        """
        with self._lock:
            if self._prefetch is not None or self.whole:
                return
            done = self._prefetch = threading.Event()
        threading.Thread(target=self._run_prefetch, args=(done,), name="trackpoint-prefetch", daemon=True).start()

    def _run_prefetch(self, done: threading.Event) -> None:
        fd, fetched = -1, None
        try:
            fd, fetched = self._download_whole()
        except Exception as exc:  # noqa: BLE001 - speculative: a reader that needs the bytes fetches them again
            _log.debug("%s: the download begun ahead failed; reads fetch what they need: %s", self.url, exc)
        try:
            with self._lock:
                if self._prefetch is done:  # not closed meanwhile
                    self._prefetch = None
                    if fd >= 0:
                        fd, taken = -1, fd
                        self._install(taken, fetched)
        except DataLossError as exc:  # the object changed: the reads find out for themselves
            _log.debug("%s: the download begun ahead is of another version: %s", self.url, exc)
        finally:
            if fd >= 0:
                os.close(fd)
            done.set()

    def _open_sparse(self) -> None:
        fd, name = tempfile.mkstemp(prefix="trackpoint-spool-")
        os.unlink(name)  # nothing to clean up once the descriptor is closed, whatever happens
        try:
            os.ftruncate(fd, self.size)  # holes: no disk used until a range is written
            self._stamp = os.fstat(fd).st_mtime_ns
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def _download_whole(self) -> tuple[int, os.stat_result | None]:
        """A descriptor of a whole copy of the object (of the size first read: see the module
        docstring), and its version where the download's answer told it."""
        fd, _, fetched = fsspec_io.download(self.url, self.what, known=self.stat)
        self.requests += 1
        return fd, fetched

    def changed(self) -> bool:
        """Whether the object at the URL is no longer the version first read (or is gone)."""
        try:
            return fsspec_io.identity(fsspec_io.stat_object(self.url, self.what)) != fsspec_io.identity(self.stat)
        except UNANSWERED + (PermissionDeniedError,):
            raise  # the store did not answer, or refused to: nothing is known of a change
        except CheckpointError:
            return True

    def _install(self, fd: int, fetched: os.stat_result | None) -> None:
        """Make the whole copy ``fd`` this object's copy (under the lock); ``fd`` is taken over.
        ``fetched``: the copy's version, where its download told it.

        Raises:
            DataLossError: The copy is of another version than the one first read (where its
                download told it), or ranges are held already and the object is another
                version now: a reader may have checked them in the copy and not read them out yet.
        """
        try:
            if fetched is not None:  # told by the download itself: no request to ask
                if fsspec_io.identity(fetched) != fsspec_io.identity(self.stat):
                    raise self._changed()
            elif self._have and self.changed():
                raise self._changed()
            if self.fd < 0:
                self.fd, self._stamp = fd, os.fstat(fd).st_mtime_ns
                fd = -1
            else:
                # Readers may hold the descriptor: it is pointed at the whole copy, which holds
                # the same bytes where the first held any, and keeps its modification time.
                os.utime(fd, ns=(self._stamp, self._stamp))
                os.dup2(fd, self.fd)
        finally:
            if fd >= 0:
                os.close(fd)
        self._have = [(0, self.size)]

    def _fetch(self, missing: list[Span]) -> None:
        fs, path = fsspec_io.filesystem(self.url)
        blocks = _blocks(missing, MAX_BLOCK)
        group: list[Span] = []
        for block in [*blocks, None]:
            if block is not None and (not group or sum(b - a for a, b in group) + block[1] - block[0] <= GROUP_BYTES):
                group.append(block)
                continue
            # On S3 one request per range under the user's retry policy, not s3fs's cat_ranges,
            # which loops around it again (see providers.s3_get); bounded by that policy.
            fetched = call(self.url, self.what, functools.partial(providers.read_ranges, fs, path, group, IN_FLIGHT))
            self.requests += len(group)
            for (start, end), data in zip(group, fetched, strict=True):
                if len(data) != end - start:
                    raise self._changed()
                view, done = memoryview(data), 0
                while done < len(view):
                    done += os.pwrite(self.fd, view[done:], start + done)
            group = [block] if block is not None else []
        # Filling holes is no change of the object: the copy keeps the modification time it was
        # made with, which in-place restores compare to tell a file written between two passes.
        os.utime(self.fd, ns=(self._stamp, self._stamp))

    def _changed(self) -> DataLossError:
        return DataLossError(
            f"{self.url}: the {self.what} changed while it was read (another writer replaced it); read it again",
            path=self.url,
        )

    def close(self) -> None:
        """Free the local copy."""
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            self._have = []
            self._prefetch = None  # a download under way frees its copy when it ends
