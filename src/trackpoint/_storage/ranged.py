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
- A reader that will want most of the object says so early (:meth:`RangedObject.prefetch`,
  or :meth:`RangedObject.opened` with ``whole_within``): the whole download runs beside the
  reader, in the download process on S3 where it can (:mod:`.download_process`: there its
  client's work does not take the reader's GIL), else on a helper thread. On S3 it is
  streamed into the copy itself,
  and a fetch waits only until the bytes it wants have arrived (the download publishes how
  far it has come), so values are read and assigned while the rest still downloads; a
  download opened by :meth:`RangedObject.opened` is the object's first request (its answer
  gives the size and ETag: no HEAD). Elsewhere every fetch waits for the whole download.
- Every wait for a download is bounded: by the client's own timeouts, which end a download
  that stops answering, and by :data:`STALL_SECONDS` without a byte whatever the client does.
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
from typing import Any, cast

from trackpoint._storage import download_process, fsspec_io, providers
from trackpoint._storage.local_files import write_at
from trackpoint._storage.opening import Opening
from trackpoint._storage.ranged_stream import STALL_SECONDS, Stream, StreamFollower
from trackpoint._storage.spans import Span, Spans, clipped
from trackpoint._storage.spans import blocks as _blocks
from trackpoint._storage.spans import merge as _merge
from trackpoint._storage.spans import subtract as _subtract
from trackpoint._storage.store_errors import UNANSWERED, call
from trackpoint.errors import CheckpointError, DataLossError, PermissionDeniedError

__all__ = ["GROUP_BYTES", "IN_FLIGHT", "MAX_BLOCK", "MAX_GAP", "STALL_SECONDS", "WHOLE_FRACTION", "RangedObject"]

_log = logging.getLogger("trackpoint")

MAX_GAP = 1 << 20
MAX_BLOCK = 16 << 20
IN_FLIGHT = 8
GROUP_BYTES = 64 << 20
WHOLE_FRACTION = 0.5


def _let_go(download: download_process.Download, spool: int) -> None:
    download.cancel()
    os.close(spool)


def _spool() -> int:
    """A new empty local copy, already unlinked: nothing to clean up once it is closed, whatever happens."""
    fd, name = tempfile.mkstemp(prefix="trackpoint-spool-")
    os.unlink(name)
    return fd


class RangedObject(StreamFollower):
    """The object at ``url`` (``what`` names it in messages), fetched into a local copy range by range.

    Thread-safe. :meth:`ensure` fetches; :attr:`fd` is the copy to ``pread`` once a range is
    ensured; :meth:`close` frees it. ``stat``: the object's :func:`~.fsspec_io.stat_object`,
    if the caller has it (else a HEAD asks).

    Raises (on construction):
        NotFoundError: No object is at ``url``.
    """

    def __init__(self, url: str, what: str, stat: os.stat_result | None = None) -> None:
        self.url = url
        self.what = what
        self.stat = stat if stat is not None else fsspec_io.stat_object(url, what)
        self.size = self.stat.st_size
        self.fd = -1
        self._stamp = 0
        self.requests = 0  # ranged GETs made (and whole downloads), for tests and benchmarks
        self._have: list[Span] = []
        # Reentrant: a download in the helper process that ended before it was followed reports
        # its end at once, on the thread that follows it, which holds the lock (ensure, prefetch).
        self._lock = threading.RLock()
        self._arrived = threading.Condition(self._lock)  # notified as a streamed download advances
        self._prefetch: threading.Event | None = None  # set when a download begun by prefetch() ends
        self._stream: Stream | None = None  # a download streamed into the copy (S3)
        self._streamed = False  # at most one per object: a failed one is not begun again

    @classmethod
    def opened(cls, url: str, what: str, whole_within: int) -> RangedObject:
        """The object at ``url``, downloading whole beside the caller already if it holds at most
        ``whole_within`` bytes (see :meth:`prefetch`).

        On S3 the download's GET is the first request: its answer gives the size and ETag that
        a HEAD would (its body is let go unread when larger). Elsewhere a HEAD comes first.

        Raises:
            NotFoundError: No object is at ``url``.
        """
        return cast(RangedObject, cls.opening(url, what, whole_within).finish()[2])

    @classmethod
    def opening(cls, url: str, what: str, whole_within: int) -> Opening:
        """:meth:`opened`, begun: where the download process runs the download (see
        :mod:`.download_process`), its GET is sent now and its answer waited for by
        :meth:`Opening.finish`, so the caller works meanwhile; elsewhere the object is opened now."""
        fs, path = fsspec_io.filesystem(url)
        where = providers.s3_location(fs, path)
        if where is not None and whole_within >= 0:
            fs.invalidate_cache(path)  # see fsspec_io._info
            spool = _spool()
            download = download_process.start(url, what, fs, where, spool, whole_within, None)
            if download is not None:
                answered = functools.partial(cls._answered, url, what, download, spool)
                return Opening(lambda: (-1, *answered()), functools.partial(_let_go, download, spool))
            os.close(spool)
        mirror = cls._opened_here(url, what, whole_within, fs, path, where)
        return Opening(lambda: (-1, mirror.stat, mirror), mirror.close)

    @classmethod
    def _answered(
        cls, url: str, what: str, download: download_process.Download, spool: int
    ) -> tuple[os.stat_result, RangedObject]:
        """The object whose download the helper began into ``spool`` (taken over), once its GET is answered."""
        try:
            answer = download.answer(STALL_SECONDS)
            mirror = cls(url, what, fsspec_io.stat_of(answer.info))
            if answer.draining:
                mirror._follow(download, spool)
                spool = -1
            return mirror.stat, mirror
        finally:
            if spool >= 0:
                os.close(spool)

    @classmethod
    def _opened_here(
        cls, url: str, what: str, whole_within: int, fs: Any, path: str, where: tuple[str, str] | None
    ) -> RangedObject:
        if where is None or whole_within < 0:
            mirror = cls(url, what)
            if mirror.size <= whole_within:
                mirror.prefetch()
            return mirror
        from fsspec.asyn import sync

        body, info = call(url, what, functools.partial(sync, fs.loop, providers.s3_open, fs, *where))
        mirror = cls(url, what, fsspec_io.stat_of(info))
        if 0 < mirror.size <= whole_within:
            mirror._start_stream(body, info.get("ETag") or "")
        else:
            fs.loop.call_soon_threadsafe(body.close)  # the body is the loop's to close
        return mirror

    def ensure(self, spans: Spans | None, wait: bool = True) -> None:
        """Fetch the ranges of ``spans`` not fetched yet (None: the whole object).

        ``wait=False`` (a hint of what is read next): when the whole object is to be downloaded,
        start streaming it and return; the reads wait for their bytes.

        Raises:
            DataLossError: A request failed, or the object changed since it was first read.
            DeadlineExceededError: A download this waits for stopped answering (see
                :data:`STALL_SECONDS`).
        """
        size = self.size
        wanted = [(0, size)] if spans is None else clipped(spans, size)
        while True:
            with self._lock:
                # All of it held (downloaded whole): no need to sort the thousands of spans asked for.
                missing = [] if self.whole else _subtract(_merge(wanted, MAX_GAP), self._have)
                if not missing:
                    if self.fd < 0:
                        self._open_sparse()
                    return
                stream = self._stream
                if stream is not None:
                    if stream.error is not None:
                        raise stream.error
                    if missing[-1][1] <= stream.covered or not wait:
                        return
                    self._await(stream, missing[-1][1])
                    continue
                pending = self._prefetch
                if pending is None:
                    if sum(b - a for a, b in missing) >= WHOLE_FRACTION * size:
                        if self._streamable():
                            self._start_stream(None, "")
                            continue
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

    @property
    def coming_whole(self) -> bool:
        """Whether every byte of the object is in the local copy, or a download of all of it is under way."""
        stream = self._stream
        return self.whole or (stream is not None and stream.error is None)

    def prefetch(self) -> None:
        """Start downloading the whole object beside the reader, which is about to want most of it.

        Meanwhile :meth:`ensure` waits for the bytes it wants (on S3; elsewhere for the whole
        download). A prefetch that fails is forgotten (the next :meth:`ensure` fetches what is
        still missing as if none had been made), unless the store stopped answering, which the
        reads then raise; one that ends after :meth:`close` frees its copy.
        """
        with self._lock:
            if self._prefetch is not None or self._stream is not None or self.whole:
                return
            if self._streamable():
                self._start_stream(None, "")
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
        fd = _spool()
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
                write_at(self.fd, data, start)
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
            if self._stream is not None:
                self._stream.cancelled = True
                if self._stream.cancel is not None:
                    self._stream.cancel()
                self._stream = None
            self._arrived.notify_all()
