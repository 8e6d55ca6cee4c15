"""The TensorFlow child's loop: read a call from stdin, run it, write its result (see ``tf_process.py``).

    python -m tests.interop.tf_side.child

Imports TensorFlow once (unless ``TP_TF_CHILD_PRELOAD=0``: the helper's own tests), says it is ready,
then serves calls until stdin closes. Its stdout is the result
channel only: anything printed goes to stderr. It never imports torch (the point of running TensorFlow
apart), and says so as an error if a call did.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import BinaryIO

from tests.interop.tf_process import _HEADER, dumps, loads


def _read(stream: BinaryIO, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _serve(requests: BinaryIO, results: BinaryIO) -> None:
    while True:
        header = _read(requests, _HEADER.size)
        if header is None:
            return
        body = _read(requests, _HEADER.unpack(header)[0])
        if body is None:
            return
        module, function, args, kwargs = loads(body)
        try:
            value = getattr(importlib.import_module(module), function)(*args, **kwargs)
            if "torch" in sys.modules:
                raise RuntimeError(f"{module}.{function} imported torch into the TensorFlow child")
            message = dumps(("returned", value))
        except Exception as exc:  # noqa: BLE001 - every exception goes back to the test
            names = tuple(cls.__name__ for cls in type(exc).__mro__)
            message = dumps(("raised", (names, str(exc), traceback.format_exc())))
        results.write(message)
        results.flush()


def main() -> None:
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print (or TensorFlow's own output) must not corrupt the result channel
    sys.stdout = sys.stderr
    if os.environ.get("TP_TF_CHILD_PRELOAD", "1") == "1":
        import tensorflow  # noqa: F401 - once, before the first call, within the start timeout

    results.write(dumps(("ready", None)))
    results.flush()
    _serve(sys.stdin.buffer, results)


if __name__ == "__main__":
    main()
