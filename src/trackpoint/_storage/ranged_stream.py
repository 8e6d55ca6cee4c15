"""A whole download streamed into a ranged object's local copy, and the reads that wait for its bytes.

The part of :class:`~trackpoint._storage.ranged.RangedObject` that follows a download of a whole
S3 object as it arrives (see that module's docstring): in the download process
(:mod:`.download_process`) or on a helper thread, the download publishes how far it has come
(:meth:`StreamFollower._advance`) and how it ended (:meth:`StreamFollower._ended`); a read waits
(:meth:`StreamFollower._await`) only until the bytes it wants are in, at most
:data:`STALL_SECONDS` without a byte.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from trackpoint._storage import download_process, fsspec_io, providers
from trackpoint._storage.local_files import write_at
from trackpoint._storage.spans import Span
from trackpoint._storage.spans import merge as _merge
from trackpoint._storage.store_errors import UNANSWERED, call
from trackpoint.errors import CheckpointError, DataLossError, DeadlineExceededError

__all__ = ["STALL_SECONDS", "Closed", "Stream", "StreamFollower"]

_log = logging.getLogger("trackpoint")

#: A read waiting for a streamed download gives up once no byte has arrived for this long,
#: even if the client's own timeouts (which end a silent download sooner) were set longer.
STALL_SECONDS = 300.0


class Stream:
    """A whole download under way into the copy, on S3: bytes ``[0, covered)`` are in it."""

    def __init__(self) -> None:
        self.covered = 0
        self.waiting = 0  # the end of the bytes a read waits for: reads are woken only then
        self.done = False
        self.cancelled = False  # the copy was closed: the download stops at its next piece
        self.cancel: Callable[[], None] | None = None  # tells the download process so
        self.error: CheckpointError | None = None  # the store did not answer: reads raise it


class Closed(CheckpointError):
    """Raised into a download whose copy was closed, to stop it."""


class StreamFollower:
    """What :class:`~trackpoint._storage.ranged.RangedObject` does with a streamed download.

    A mixin: the attributes below are the object's (see its constructor), and the two methods
    that raise here are its own.
    """

    url: str
    what: str
    stat: os.stat_result
    size: int
    fd: int
    requests: int
    _stamp: int
    _have: list[Span]
    _arrived: threading.Condition
    _stream: Stream | None
    _streamed: bool

    def _open_sparse(self) -> None:
        raise NotImplementedError

    def _changed(self) -> DataLossError:
        raise NotImplementedError

    def _await(self, stream: Stream, end: int) -> None:
        """Wait (under the lock) for ``stream`` to bring the bytes up to ``end`` or to end, at
        most :data:`STALL_SECONDS`."""
        before = stream.covered
        # Woken once the bytes are in, not at every piece: each wake-up would take the GIL from the download.
        stream.waiting = min(stream.waiting or end, end)
        self._arrived.wait(timeout=STALL_SECONDS)
        if stream.covered == before and not stream.done:
            raise DeadlineExceededError(
                f"{self.url}: the download of the {self.what} brought no byte for {STALL_SECONDS:.0f} s; check the "
                "endpoint and the network, or set a shorter read_timeout in the storage options to fail sooner",
                path=self.url,
            )

    def _streamable(self) -> bool:
        if self._streamed:
            return False
        fs, path = fsspec_io.filesystem(self.url)
        return self.size > 0 and providers.s3_location(fs, path) is not None

    def _start_stream(self, body: Any, etag: str) -> None:
        """Stream the object into the copy, in the download process or on a helper thread (the lock
        held, or the object not shared yet); ``body``: that of a GET already answered (of
        ``etag``), else one is made (and by the download process, where it can)."""
        if self.fd < 0:
            self._open_sparse()
        fd = os.dup(self.fd)  # the download's own: a close() meanwhile frees no descriptor under it
        if body is None:
            fs, path = fsspec_io.filesystem(self.url)
            where = providers.s3_location(fs, path)
            assert where is not None  # only streamed where it is S3
            version = fsspec_io.identity(self.stat)
            download = download_process.start(self.url, self.what, fs, where, fd, None, version)
            if download is not None:
                os.close(fd)  # the helper holds its own
                self._streamed = True
                self._stream = Stream()
                self._attach(download, self._stream)
                return
        stream = self._stream = Stream()
        self._streamed = True
        threading.Thread(
            target=self._run_stream, args=(stream, fd, body, etag), name="trackpoint-prefetch", daemon=True
        ).start()

    def _run_stream(self, stream: Stream, fd: int, body: Any, etag: str) -> None:
        from fsspec.asyn import sync

        def write(offset: int, data: bytes) -> None:  # on the client's event loop
            if stream.cancelled:
                raise Closed(f"{self.url}: the local copy was closed")
            write_at(fd, data, offset)
            self._advance(stream, offset + len(data))

        error: CheckpointError | None = None
        changed = False  # another version than the one first read: the reads raise it
        whole = False  # every byte arrived: set last, so that nothing else can mark the copy whole
        try:
            fs, path = fsspec_io.filesystem(self.url)
            where = providers.s3_location(fs, path)
            assert where is not None  # only streamed where it is S3
            if body is None:  # a prefetch of an object whose version a HEAD named: the GET must be it
                body, info = call(self.url, self.what, functools.partial(sync, fs.loop, providers.s3_open, fs, *where))
                etag = info.get("ETag") or ""
                if fsspec_io.identity(fsspec_io.stat_of(info)) != fsspec_io.identity(self.stat):
                    fs.loop.call_soon_threadsafe(body.close)
                    changed = True
                    raise self._changed()
            drain = functools.partial(sync, fs.loop, providers.s3_drain, fs, *where, body, etag, write)
            if call(self.url, self.what, drain) != self.size:
                changed = True
                raise self._changed()
            whole = True
        except CheckpointError as exc:
            error = exc
        finally:
            self._ended(stream, whole, changed, error)
            os.close(fd)

    def _advance(self, stream: Stream, covered: int) -> None:
        """The download ``stream`` has brought bytes ``[0, covered)``: wake the reads that wait for them."""
        with self._arrived:
            stream.covered = max(stream.covered, covered)  # a report passed on late never takes bytes back
            if stream.waiting and stream.covered >= stream.waiting:
                stream.waiting = 0
                self._arrived.notify_all()

    def _ended(self, stream: Stream, whole: bool, changed: bool, error: CheckpointError | None) -> None:
        """The download ``stream`` ended: with every byte (``whole``), with another version than the
        one first read (``changed``), or with ``error``."""
        if whole:
            self.requests += 1
        with self._arrived:
            stream.done = True
            if self._stream is stream:  # not closed meanwhile
                if whole:
                    self._have = [(0, self.size)]
                    self._stream = None
                elif changed or isinstance(error, UNANSWERED):
                    stream.error = error  # the reads raise it: asking again would wait as long
                else:  # what arrived is of the version first read; the reads fetch the rest
                    _log.debug("%s: the download begun ahead failed; reads fetch what they need: %s", self.url, error)
                    self._have = _merge([*self._have, (0, stream.covered)], 0)
                    self._stream = None
                if self.fd >= 0:  # filling holes is no change of the object (see _fetch)
                    os.utime(self.fd, ns=(self._stamp, self._stamp))
            self._arrived.notify_all()

    def _follow(self, download: download_process.Download, spool: int) -> None:
        """Take ``spool``, the copy the helper downloads into, as this object's copy (not shared yet)."""
        os.ftruncate(spool, self.size)  # readers compare the copy's size between passes (see module docstring)
        self.fd, self._stamp = spool, os.fstat(spool).st_mtime_ns
        self._streamed = True
        self._stream = Stream()
        self._attach(download, self._stream)

    def _attach(self, download: download_process.Download, stream: Stream) -> None:
        """Follow ``download``, run by the helper process, as ``stream`` (see :mod:`.download_process`)."""
        stream.cancel = download.cancel

        def ended(total: int | None, error: CheckpointError | None) -> None:
            changed = error is None and total != self.size
            self._ended(stream, error is None and not changed, changed, self._changed() if changed else error)

        download.attach(functools.partial(self._advance, stream), ended)
