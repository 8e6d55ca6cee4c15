"""Whole downloads from S3 run by a helper process, so that their client work does not take the reader's GIL.

A restore that streams a data object while it reads and checks values (:mod:`.ranged`) does the
download's work on s3fs's event-loop thread: aiohttp's reads (about 90 for 22 MiB), botocore's
checksum of the body, the writes to the local copy. Each of them needs the GIL, which the
restoring thread holds while it checks and hands out 20,000 values, so the download waited for
the restore and the two ran one after the other (``PERFORMANCE.md``, "Object stores"). In a
process of its own the download runs on the other core, beside the restore.

The helper is one process per Python process, started by the first download that could use it
(that download still runs on a thread) and kept for the next ones. The parent sends it, over a
Unix socket, the filesystem as s3fs rebuilds it (``fs.to_dict()``) with its ``retries`` (an
attribute ``to_dict`` leaves out), the environment (botocore reads credentials there: the part
:func:`client_environment` keeps), the bucket and key, and the descriptor of the local copy. The helper
makes the GET with the same ``providers.s3_open`` and ``providers.s3_drain`` the thread would
use (the same retries, conditions and error translation), writes each piece into the copy and
reports how far it has come, every :data:`REPORT_BYTES` and at the end. A reader thread here
passes that on to the download's owner (``RangedObject``), which wakes the reads waiting for
those bytes.

What stays as it was: a filesystem that cannot be sent (options that are no JSON, an s3fs
subclass) is downloaded on a thread; the helper dies with its parent; a helper that dies ends
its downloads as a failed thread's download ends (a :class:`~trackpoint.errors.DataLossError`,
which the store did not time out on), so the reads fetch what is missing themselves, and the
next download starts a new helper; a process forked from this one starts its own.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trackpoint._storage import child_processes
from trackpoint.errors import CheckpointError, DataLossError, DeadlineExceededError

__all__ = [
    "REPORT_BYTES",
    "REPORT_SECONDS",
    "Answer",
    "Download",
    "client_environment",
    "helper_pid",
    "start",
    "started",
]

_log = logging.getLogger("trackpoint")

#: The helper reports its progress at least every this many bytes (and at the end): each report
#: wakes a thread here, which takes the GIL from the restore.
REPORT_BYTES = 4 << 20
#: ... and at least every this many seconds while bytes come: a slow link still shows progress
#: long before a read gives up on it (``ranged.STALL_SECONDS``).
REPORT_SECONDS = 0.5
_MESSAGE = 1 << 16  # bytes: a message (JSON) is at most this long
_FS_CLASS = "s3fs.core:S3FileSystem"
_CLIENT_NAME = re.compile(
    r"(AWS_|BOTO_|FSSPEC_|S3FS_).*|.*_PROXY|NETRC|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE", re.IGNORECASE
)

#: Whether a helper may be used at all (tests switch it off to exercise the thread path).
ENABLED = hasattr(socket, "send_fds") and hasattr(os, "pwrite")


@dataclass(frozen=True)
class Answer:
    """What the GET's answer said: the object's ``info`` (``size``, ``ETag``), whether the helper
    goes on to download it (``draining``), and whether it is another version than expected."""

    info: dict[str, Any]
    draining: bool
    changed: bool


class Download:
    """One download in the helper, as its owner sees it (see :meth:`attach`)."""

    def __init__(self, helper: _Helper, number: int, url: str) -> None:
        self._helper = helper
        self.number = number
        self.url = url
        self._answered = threading.Event()
        self._answer: Answer | None = None
        self._error: CheckpointError | None = None
        self._lock = threading.Lock()
        self._covered = 0
        self._end: tuple[int | None, CheckpointError | None] | None = None
        self._on_progress: Callable[[int], None] | None = None
        self._on_end: Callable[[int | None, CheckpointError | None], None] | None = None

    def answer(self, timeout: float) -> Answer:
        """Wait at most ``timeout`` seconds for the GET's answer.

        Raises:
            CheckpointError: The GET failed (translated as a thread's GET would be), the
                helper died, or no answer came in time.
        """
        if not self._answered.wait(timeout):
            self.cancel()
            raise DeadlineExceededError(
                f"{self.url}: the download process had no answer to its GET within {timeout:.0f} s; check the "
                "endpoint and the network, or set a shorter read_timeout in the storage options to fail sooner",
                path=self.url,
            )
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer

    def attach(
        self, on_progress: Callable[[int], None], on_end: Callable[[int | None, CheckpointError | None], None]
    ) -> None:
        """Have ``on_progress(covered)`` called as bytes ``[0, covered)`` are in the copy, and
        ``on_end(total, error)`` once when the download ends (``total``: the bytes that came, None
        on an error). What happened before is passed on at once, on the calling thread; the rest
        on the thread that reads the helper's reports. Neither may block."""
        with self._lock:
            self._on_progress, self._on_end = on_progress, on_end
            covered, end = self._covered, self._end
        if covered:
            on_progress(covered)
        if end is not None:
            on_end(*end)

    def cancel(self) -> None:
        """Ask the helper to stop this download at its next piece (the copy was closed)."""
        self._helper.send({"cancel": self.number})

    def _answered_with(self, answer: Answer | None, error: CheckpointError | None) -> None:
        self._answer, self._error = answer, error
        self._answered.set()

    def _progressed(self, covered: int) -> None:
        with self._lock:
            self._covered = covered
            on_progress = self._on_progress
        if on_progress is not None:
            on_progress(covered)

    def _ended(self, total: int | None, error: CheckpointError | None) -> None:
        if not self._answered.is_set():
            self._answered_with(
                None, error or DataLossError(f"{self.url}: the download ended unanswered", path=self.url)
            )
        with self._lock:
            self._end = (total, error)
            on_end = self._on_end
        if on_end is not None:
            on_end(total, error)


class _Helper:
    """The helper process, the socket to it and the thread that reads its reports."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process: subprocess.Popen[bytes] = child_processes.spawn(
                "trackpoint._storage.download_process", theirs.fileno(), pipes=False
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._downloads: dict[int, Download] = {}
        self._numbers = itertools.count()
        self.alive = True
        self.begun = 0  # downloads handed to it, for tests and benchmarks
        threading.Thread(target=self._listen, name="trackpoint-download-reports", daemon=True).start()

    def begin(self, request: dict[str, Any], fd: int) -> Download:
        """Hand a download to the helper.

        Raises:
            OSError: It could not be sent (the helper is gone, or the request does not fit a message).
        """
        with self._lock:
            download = Download(self, next(self._numbers), request["url"])
            message = json.dumps({**request, "number": download.number}).encode()
            if len(message) > _MESSAGE:
                raise OSError(f"a request of {len(message)} bytes does not fit a message")
            self._downloads[download.number] = download
            self.begun += 1
        try:
            socket.send_fds(self.sock, [message], [fd])
        except OSError:
            with self._lock:
                self._downloads.pop(download.number, None)
            raise
        return download

    def send(self, message: dict[str, Any]) -> None:
        if self.pid != os.getpid():
            return  # a forked copy: the socket and the downloads are the parent's
        with contextlib.suppress(OSError):  # a helper gone has stopped every download already
            self.sock.send(json.dumps(message).encode())

    def _listen(self) -> None:
        try:
            while self._take_report():
                pass
        finally:
            self._stopped()

    def _take_report(self) -> bool:
        """Pass the helper's next report on; False once it is gone (or said what it cannot have)."""
        try:
            raw = self.sock.recv(_MESSAGE)
            report = json.loads(raw) if raw else None
        except (OSError, ValueError):
            report = None
        if not isinstance(report, dict) or not isinstance(report.get("number"), int):
            return False
        with self._lock:
            download = self._downloads.get(report["number"])
            if download is not None and "end" in report:
                del self._downloads[report["number"]]
        if download is None:
            return True
        # A report that is not of these forms ends the reading (KeyError): the helper's downloads fail over.
        if "info" in report:
            download._answered_with(Answer(report["info"], report["draining"], report["changed"]), None)
        elif "covered" in report:
            download._progressed(report["covered"])
        else:
            download._ended(report["end"], child_processes.decode_error(report["error"].encode()))
        return True

    def _stopped(self) -> None:
        """The helper is gone: every download it had ends, as a failed thread's would."""
        self.alive = False
        with self._lock:
            left, self._downloads = list(self._downloads.values()), {}
        for download in left:
            message = f"{download.url}: the download process ended before the download did"
            download._ended(None, DataLossError(message, path=download.url))
        with contextlib.suppress(OSError):
            self.sock.close()
        try:  # it ends once its socket closes; reaped here, so that no zombie is left
            self.process.wait(timeout=child_processes.STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_lock = threading.Lock()
_helper: _Helper | None = None
_starting = False
_failed = False  # a helper could not be started: downloads run on threads from then on
_begun_before = 0  # downloads handed to helpers that are gone


def _ready_helper() -> _Helper | None:
    """The helper if it runs; else None, having started one (on a thread) for the next download."""
    global _starting
    with _lock:
        helper = _helper
        if helper is not None and helper.alive and helper.pid == os.getpid():
            return helper
        if not _starting and not _failed:
            _starting = True
            threading.Thread(target=_start_helper, name="trackpoint-download-start", daemon=True).start()
        return None


def started(timeout: float) -> int | None:
    """Start the helper if none runs and wait for it at most ``timeout`` seconds (tests and
    benchmarks, which want it running before they time or count anything); its PID, or None."""
    deadline = time.monotonic() + timeout
    while (helper := _ready_helper()) is None:
        if _failed or time.monotonic() > deadline:
            return None
        time.sleep(0.02)
    return helper.process.pid


def helper_pid() -> int | None:
    """The PID of the helper that runs this process's downloads, if one runs."""
    with _lock:
        helper = _helper
    return helper.process.pid if helper is not None and helper.alive and helper.pid == os.getpid() else None


def begun() -> int:
    """How many downloads this process handed to the helpers it started (for tests and benchmarks)."""
    return _begun_before + (_helper.begun if _helper is not None else 0)


def _start_helper() -> None:
    global _helper, _starting, _failed, _begun_before
    try:
        helper: _Helper | None = _Helper()
    except OSError as exc:
        _log.debug("the download process could not be started; downloads run on threads: %s", exc)
        helper = None
    with _lock:
        _begun_before += _helper.begun if _helper is not None else 0
        _helper = helper
        # A helper that died is started again by a later download; one that could not start is not.
        _starting, _failed = False, helper is None


def _forget_after_fork() -> None:
    """In a forked copy of this process: the helper is the parent's; a download starts one of its own."""
    global _helper, _starting, _failed, _lock
    _lock = threading.Lock()
    _helper, _starting, _failed = None, False, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def client_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What of ``environ`` an S3 client reads when it is made: botocore's and fsspec's settings
    (credentials, profiles, region, endpoints), proxies and certificate bundles.

    Examples:
        >>> client_environment({"AWS_PROFILE": "ci", "https_proxy": "http://p:3128", "HOME": "/root"})
        {'AWS_PROFILE': 'ci', 'https_proxy': 'http://p:3128'}
    """
    return {name: value for name, value in environ.items() if _CLIENT_NAME.match(name)}


def _sendable(fs: Any) -> dict[str, Any] | None:
    """``fs`` as the helper makes it again, or None where it cannot (then a thread downloads)."""
    if f"{type(fs).__module__}:{type(fs).__qualname__}" != _FS_CLASS:
        return None  # a subclass may behave otherwise than the s3fs the helper makes
    if type(fs.retries) is not int:
        return None
    try:
        described = fs.to_dict()
        json.dumps(described)
    except (TypeError, ValueError, AttributeError):
        return None
    return dict(described)


def start(
    url: str, what: str, fs: Any, where: tuple[str, str], fd: int, limit: int | None, expect: tuple[int, int] | None
) -> Download | None:
    """Start the whole download of ``where`` (bucket, key) into ``fd`` in the helper; None if none can run it.

    Args:
        url, what: The object and what it is, for messages.
        fs: The s3fs filesystem of ``url``.
        where: Its bucket and key.
        fd: The local copy; the helper writes at the object's offsets.
        limit: Larger objects are not downloaded (the answer says so); None: no limit.
        expect: The version first read (``fsspec_io.identity``): another one is not downloaded
            (the answer says it changed).
    """
    if not ENABLED:
        return None
    described = _sendable(fs)
    if described is None:
        return None
    helper = _ready_helper()
    if helper is None:
        return None
    request = {
        "url": url,
        "what": what,
        "fs": described,
        "retries": fs.retries,
        "env": client_environment(os.environ),
        "where": list(where),
        "limit": limit,
        "expect": list(expect) if expect is not None else None,
    }
    try:
        return helper.begin(request, fd)  # more options than a message holds: OSError, a thread runs it
    except OSError as exc:
        _log.debug("the download process did not take a download; a thread runs it: %s", exc)
        return None


# -- the helper ---------------------------------------------------------------------------------


def main(fd: int) -> None:
    """The helper: run each download the parent sends, on a thread of its own, until the socket closes."""
    if not child_processes.die_with_parent():
        return
    from trackpoint._storage.download_work import serve

    serve(socket.socket(fileno=fd))
