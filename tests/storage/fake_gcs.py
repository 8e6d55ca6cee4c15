"""A GCS stand-in for the tests: the ``gcp-storage-emulator`` server, with the proxy in front doing
what the emulator does not, checking ``ifGenerationMatch`` preconditions.

The emulator stores every write whatever its precondition (measured in
test_gcs_semantics.py), so on its own it would pass a second writer that GCS refuses with
412. The proxy passes one write at a time and, for a write with ``ifGenerationMatch=N``, first
asks the emulator for the object's generation (0: none there), answering 412 itself when it is
not N, as GCS decides conditional writes one at a time.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.parse

from tests.storage.proxy import Proxy


class FakeGCS:
    """The emulator on 127.0.0.1 and a checking :class:`Proxy` before it (:attr:`endpoint`)."""

    def __init__(self) -> None:
        from gcp_storage_emulator.server import create_server

        logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)
        # Port 0: the kernel picks a free one as the server binds it. A port probed first and bound
        # later could be taken in between (by another pytest-xdist worker's servers).
        self._server = create_server("127.0.0.1", 0, in_memory=True)
        self._server.start()
        self.port = int(self._server._api._httpd.server_address[1])
        # A client closing a connection the emulator still writes to (a ranged read done) is no
        # error of the test; its server would print a traceback for each.
        self._server._api._httpd.handle_error = lambda request, address: None
        self.direct = f"http://127.0.0.1:{self.port}"
        self.proxy = Proxy(self.direct)
        self.proxy.precondition = self._check
        self.endpoint = self.proxy.endpoint

    def close(self) -> None:
        self.proxy.close()
        self._server.stop()

    def _generation(self, bucket: str, name: str) -> str:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        return "0" if response.status == 404 else str(json.loads(body)["generation"])

    def _check(self, method: str, path: str, query: str, body: bytes) -> int | None:
        params = urllib.parse.parse_qs(query)
        wanted = params.get("ifGenerationMatch", [None])[0]
        if wanted is None or method != "POST" or "/b/" not in path:
            return None
        bucket = path.split("/b/", 1)[1].split("/", 1)[0]
        name = params.get("name", [None])[0]
        if name is None:  # a multipart upload: the name is in its JSON part
            part = body.split(b"\n\n", 1)[1]
            name = json.loads(part[: part.index(b"\n--")])["name"]
        return None if self._generation(bucket, name) == wanted else 412
