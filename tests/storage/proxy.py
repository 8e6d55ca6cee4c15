"""A forwarding HTTP proxy on 127.0.0.1 in front of the S3 server, for what the server cannot do.

- ``serialise_writes``: one write request (PUT, POST, DELETE) is forwarded at a time. moto
  checks ``If-None-Match``/``If-Match`` and stores without a lock, so two truly concurrent
  conditional writes can both succeed there; S3 decides them one at a time, and so does the
  server behind this proxy.
- ``fault``: called with each request's method, path and query; it returns None to forward it,
  an HTTP status to answer with instead (500, 503: the server never sees the request),
  ``"drop"`` to close the connection without an answer before forwarding, or
  ``"drop-after"`` to forward it and then close the connection without passing the answer on
  (the write happened; the client does not know), or ``"stall"`` to answer nothing and hold
  the connection open until the proxy closes (a store that accepts connections and never
  answers: only the client's read timeout ends the request).

``trickle``: ``(piece, pause)`` sends the body of each whole-object GET whose path ends with
``trickle_suffix`` ``piece`` bytes at a time, ``pause`` seconds apart (a slow link: the client
sees the first bytes long before the last).

``requests`` logs every request's method, path and query; ``gets`` every GET's path and
``Range`` header (None for a whole object); ``max_in_flight`` is the most requests it has
had under way at once; ``sent`` counts the bytes of the request bodies it was given (what a
client uploaded), by method and path.
"""

from __future__ import annotations

import http.client
import http.server
import socketserver
import sys
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

Fault = Callable[[str, str, str], "int | str | None"]

# A stalled request is let go when the proxy closes, or after this long whatever happens: no
# handler thread outlives a test by more.
_STALL_LIMIT = 300.0
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def _answer(handler: http.server.BaseHTTPRequestHandler, status: int, kind: str, body: bytes) -> None:
    """Answer a request with ``status`` and ``body`` instead of forwarding it."""
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer is what the timeout tests do on purpose: no traceback.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class Proxy:
    """Forward ``http://127.0.0.1:<port>`` to ``upstream``; see the module docstring."""

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.serialise_writes = False
        self.fault: Fault | None = None
        # Called with a write's method, path, query and body while no other write is under way;
        # an HTTP status it returns is the answer instead (a store's precondition check).
        self.precondition: Callable[[str, str, str, bytes], int | None] | None = None
        self.trickle: tuple[int, float] | None = None
        self.trickle_suffix = ".data-00000-of-00001"
        self.requests: list[tuple[str, str, str]] = []
        self.gets: list[tuple[str, str | None]] = []  # each GET's path and Range header
        self.sent: list[tuple[str, str, int]] = []  # each request's method, path and body length
        self.in_flight = 0
        self.max_in_flight = 0
        self._write_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._closed = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                proxy._forward(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()  # stalled requests let go of their connections
        self._server.shutdown()
        self._server.server_close()

    def _forward(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        with self._log_lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._pass_on(handler)
        finally:
            with self._log_lock:
                self.in_flight -= 1

    def _pass_on(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        method = handler.command
        path, _, query = handler.path.partition("?")
        with self._log_lock:
            self.requests.append((method, path, query))
            if method == "GET":
                self.gets.append((path, handler.headers.get("Range")))
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self._log_lock:
            self.sent.append((method, path, len(body)))
        action = self.fault(method, path, query) if self.fault is not None else None
        if action == "drop":
            handler.close_connection = True
            handler.connection.close()
            return
        if action == "stall":
            self._closed.wait(timeout=_STALL_LIMIT)
            handler.close_connection = True
            handler.connection.close()
            return
        if isinstance(action, int):
            code = b"SlowDown" if action == 503 else b"InternalError"
            _answer(
                handler, action, "application/xml", b"<Error><Code>%s</Code><Message>injected</Message></Error>" % code
            )
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP and k.lower() != "expect"}
        write = method in ("PUT", "POST", "DELETE")
        lock = self._write_lock if write and (self.serialise_writes or self.precondition) else None
        if lock is not None:
            lock.acquire()
        try:
            refused = self.precondition(method, path, query, body) if write and self.precondition else None
            if refused is not None:
                _answer(
                    handler,
                    refused,
                    "application/json",
                    b'{"error": {"code": %d, "message": "conditionNotMet"}}' % refused,
                )
                return
            upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
            try:
                upstream.request(method, handler.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                status, reason, answer = response.status, response.reason, response.getheaders()
            finally:
                upstream.close()
        finally:
            if lock is not None:
                lock.release()
        if action == "drop-after":
            handler.close_connection = True
            handler.connection.close()
            return
        handler.send_response(status, reason)
        for key, value in answer:
            if key.lower() not in _HOP_BY_HOP and (key.lower() != "content-length" or method == "HEAD"):
                handler.send_header(key, value)  # a HEAD's length is the object's, not of its empty body
        if method != "HEAD":
            handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if method == "HEAD":
            return
        trickle = self.trickle
        if trickle is None or not path.endswith(self.trickle_suffix) or handler.headers.get("Range"):
            handler.wfile.write(data)
            return
        piece, pause = trickle
        for start in range(0, len(data), piece):
            handler.wfile.write(data[start : start + piece])
            handler.wfile.flush()
            if self._closed.wait(timeout=pause):
                break
