"""The work of the download process (:mod:`.download_process`): each GET streamed into the copy it was given.

Runs in the helper only. A request names the filesystem (``fs.to_dict()`` of an s3fs
filesystem, and its ``retries``; no other class is made), the environment to make it in, the
object, a size limit and the version expected; its local copy comes with it as a descriptor.
The answers, all JSON:
``{"number", "info", "draining", "changed"}`` once the GET is answered, ``{"number", "covered"}``
as the bytes come, and ``{"number", "end", "error"}`` last (``end``: the bytes that came, or null).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
import time
from collections import OrderedDict
from typing import Any

from trackpoint._storage import child_processes, fsspec_io, providers
from trackpoint._storage.download_process import _FS_CLASS, _MESSAGE, REPORT_BYTES, REPORT_SECONDS, client_environment
from trackpoint._storage.local_files import write_at
from trackpoint._storage.ranged_stream import Closed
from trackpoint._storage.store_errors import call
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = ["serve"]

_KEPT = 8  # filesystems kept (one per set of options and environment)
_filesystems: OrderedDict[str, Any] = OrderedDict()
_made = threading.Lock()


def serve(sock: socket.socket) -> None:
    """Take requests from ``sock`` until it closes; run each on a thread of its own."""
    sent = threading.Lock()
    running: set[int] = set()
    cancelled: set[int] = set()

    def send(message: dict[str, Any]) -> None:
        with sent, contextlib.suppress(OSError):  # the parent gone: this process dies with it
            sock.send(json.dumps(message).encode())

    while True:
        try:
            raw, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 1)
        except OSError:
            return
        if not raw:
            return
        try:
            request = json.loads(raw)
        except ValueError:
            request = {}
        if "cancel" in request:
            if request["cancel"] in running:  # one that ended already has nothing to stop
                cancelled.add(request["cancel"])
        elif "number" in request and len(fds) == 1:
            running.add(request["number"])
            threading.Thread(target=_download, args=(request, fds.pop(), running, cancelled, send), daemon=True).start()
        for fd in fds:  # a message that is neither: nothing to do (the parent sends none)
            os.close(fd)


def _filesystem(described: dict[str, Any], env: dict[str, str], retries: int) -> Any:
    """The s3fs filesystem ``described``, made (once) in the parent's environment ``env``.

    ``retries`` is the parent's ``fs.retries``: s3fs's attempts around each request, an attribute
    (of the class, or set on a filesystem) that ``to_dict`` does not carry.
    """
    if described.get("cls") != _FS_CLASS:
        raise InvalidArgumentError(f"the download process makes only {_FS_CLASS} filesystems")
    key = json.dumps([described, env, retries], sort_keys=True)
    with _made:
        fs = _filesystems.get(key)
        if fs is None:
            from fsspec import AbstractFileSystem
            from fsspec.asyn import sync

            # botocore reads credentials from the environment when its client is made: that
            # is now, under the parent's environment, one filesystem at a time.
            for name in client_environment(os.environ).keys() - env.keys():
                del os.environ[name]
            os.environ.update(env)
            fs = AbstractFileSystem.from_dict({**described, "skip_instance_cache": True})
            fs.retries = retries
            sync(fs.loop, fs.set_session)
            _filesystems[key] = fs
            while len(_filesystems) > _KEPT:
                _filesystems.popitem(last=False)
        _filesystems.move_to_end(key)
    return fs


def _download(request: dict[str, Any], fd: int, running: set[int], cancelled: set[int], send: Any) -> None:
    number, url, what = request["number"], request["url"], request["what"]
    total: int | None = None
    error: BaseException | None = None
    try:
        from fsspec.asyn import sync

        fs = _filesystem(request["fs"], request["env"], request["retries"])
        bucket, key = request["where"]
        body, info = call(url, what, functools.partial(sync, fs.loop, providers.s3_open, fs, bucket, key))
        size, etag = int(info.get("size") or 0), info.get("ETag") or ""
        expect, limit = request["expect"], request["limit"]
        changed = expect is not None and list(fsspec_io.identity(fsspec_io.stat_of(info))) != expect
        draining = not changed and 0 < size and (limit is None or size <= limit)
        send({"number": number, "info": {"size": size, "ETag": etag}, "draining": draining, "changed": changed})
        if not draining:
            fs.loop.call_soon_threadsafe(body.close)  # the body is the loop's to close
            total = 0
            return
        reported, reported_at = 0, time.monotonic()

        def write(offset: int, data: bytes) -> None:  # on the client's event loop
            nonlocal reported, reported_at
            if number in cancelled:
                raise Closed(f"{url}: the local copy was closed")
            write_at(fd, data, offset)
            covered = offset + len(data)
            now = time.monotonic()
            if covered - reported >= REPORT_BYTES or now - reported_at >= REPORT_SECONDS:
                reported, reported_at = covered, now
                send({"number": number, "covered": covered})

        drain = functools.partial(sync, fs.loop, providers.s3_drain, fs, bucket, key, body, etag, write)
        total = call(url, what, drain)
    except Exception as exc:  # noqa: BLE001 - sent to the parent, whose reads raise it or fetch again
        error = exc
    finally:
        os.close(fd)
        running.discard(number)
        cancelled.discard(number)
        if total is not None and error is None:
            send({"number": number, "covered": total})
        raw = child_processes.encode_error(error, DataLossError, f"{url}: the download of the {what}", url)
        send({"number": number, "end": total if error is None else None, "error": raw.decode()})
