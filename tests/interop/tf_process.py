"""TensorFlow in a process of its own: the pytest process calls functions of ``tests/interop/tf_side/*.py``.

Importing TensorFlow and then triton (which a CUDA build of torch brings) in one process segfaults, and
the suite imports torch. So no test process holds TensorFlow: each pytest process (each xdist worker) starts
one TensorFlow child on its first call, reuses it for every later call, and ends it at exit. A test sends
"run ``F`` of ``tests.interop.tf_side.X`` with these arguments" and gets the result back:

    >>> files = tf_side("files")  # starts nothing yet
    >>> files.module
    'tests.interop.tf_side.files'

and then ``files.list_variables(prefix)`` runs ``tf.train.list_variables(prefix)`` in the child. Only the
child imports the ``tf_side`` modules (they import TensorFlow at module level); ``tests/interop/tf_guard.py``
fails any test after which the pytest process holds TensorFlow.

Arguments and results are plain data (str, bytes, numbers, tuples, lists, dicts, sets), numpy arrays and
numpy scalars, pickled between these two trusted test processes of ours: pickle keeps tuples, bytes and
dtypes (bfloat16 included) as they are, which JSON would not. Both sides load with :class:`PlainUnpickler`,
which refuses every other class, so a TensorFlow object can never be unpickled (and TensorFlow imported)
here by mistake. An exception in the child comes back as :class:`TFError` with its class names, message
and the child's traceback; a child that dies or overruns its time fails the call with its stderr, and the
next call starts a new child.
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

START_TIMEOUT = 300.0  # seconds for the child to import TensorFlow (several on a busy 2-core machine)
CALL_TIMEOUT = 300.0  # seconds for one call unless the caller gives its own
STOP_TIMEOUT = 10.0  # seconds for the child to leave after its stdin closes, then it is killed
STDERR_TAIL = 6000  # characters of the child's stderr shown when it fails

_HEADER = struct.Struct("<Q")  # the byte length of the pickle that follows
_BUILTINS = frozenset({"set", "frozenset", "complex", "slice", "range", "bytearray"})


class PlainUnpickler(pickle.Unpickler):
    """Loads plain data and numpy values only (numpy and ml_dtypes classes; a few builtins)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] in ("numpy", "ml_dtypes") or (module == "builtins" and name in _BUILTINS):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data: convert it on the TensorFlow side")


def dumps(value: object) -> bytes:
    """One framed message: the pickle's length, then the pickle."""
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def loads(body: bytes) -> Any:
    """The value of one message's pickle (plain data only)."""
    return PlainUnpickler(io.BytesIO(body)).load()


class TFError(Exception):
    """An exception the TensorFlow side raised: its class (and base class) names, message and traceback.

    A test checks what it would have checked of TensorFlow's exception: ``caught.value.is_a("DataLossError")``
    for ``pytest.raises(tf.errors.DataLossError)``, ``caught.value.message`` for its text.
    """

    def __init__(self, names: tuple[str, ...], message: str, remote_traceback: str) -> None:
        super().__init__(f"{names[0]}: {message}\n--- in the TensorFlow child ---\n{remote_traceback}")
        self.names, self.message = names, message

    @property
    def name(self) -> str:
        """The exception's class name, e.g. ``DataLossError``."""
        return self.names[0]

    def is_a(self, name: str) -> bool:
        """Whether the exception's class or one of its bases is called ``name`` (``except name`` would catch it)."""
        return name in self.names


class TFChildFailed(RuntimeError):
    """The TensorFlow child died or overran its time; the message ends with its stderr."""


class TFChild:
    """One TensorFlow child process and its two pipes (requests on its stdin, results on its old stdout)."""

    def __init__(self, preload: bool = True) -> None:
        """Start the child and wait (at most START_TIMEOUT) until it has imported TensorFlow; ``preload=False``
        skips that import (the helper's own tests)."""
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - open for the child's life, see stop()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["TP_TF_CHILD_PRELOAD"] = "1" if preload else "0"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.interop.tf_side.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=ROOT,
            env=env,
        )
        self._receive(START_TIMEOUT, "importing TensorFlow")

    def call(self, module: str, function: str, args: tuple, kwargs: dict, timeout: float) -> Any:
        """``module.function(*args, **kwargs)`` in the child; raises :class:`TFError` for its exception."""
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(dumps((module, function, args, kwargs)))
            stdin.flush()
        except BrokenPipeError:
            self._fail(f"calling {module}.{function}: the child is gone")
        kind, value = self._receive(timeout, f"{module}.{function}")
        if kind == "raised":
            raise TFError(*value)
        return value

    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        """Close its stdin (the child leaves its loop), wait a bounded time, then kill it."""
        if self._process.stdin is not None and not self._process.stdin.closed:
            try:
                self._process.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self._process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._stderr.close()

    def _receive(self, timeout: float, doing: str) -> tuple[str, Any]:
        header = self._read(_HEADER.size, timeout, doing)
        return loads(self._read(_HEADER.unpack(header)[0], timeout, doing))

    def _read(self, size: int, timeout: float, doing: str) -> bytes:
        stdout = self._process.stdout
        assert stdout is not None
        deadline, chunks, left = time.monotonic() + timeout, [], size
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([stdout], [], [], wait)[0]:
                self._process.kill()
                self._process.wait(STOP_TIMEOUT)
                self._fail(f"{doing} took longer than {timeout:.0f} s: the child was killed")
            chunk = os.read(stdout.fileno(), left)
            if not chunk:
                self._process.wait(STOP_TIMEOUT)
                self._fail(f"the child died during {doing} (exit status {self._process.returncode})")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _fail(self, what: str) -> None:
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace")[-STDERR_TAIL:]
        raise TFChildFailed(f"TensorFlow child: {what}\n--- its stderr (last {STDERR_TAIL} characters) ---\n{tail}")


_child: TFChild | None = None


def call(module: str, function: str, *args: Any, timeout: float = CALL_TIMEOUT, **kwargs: Any) -> Any:
    """Run ``function`` of ``tests.interop.tf_side.<module>`` in this process's TensorFlow child.

    Starts the child on the first call and again after one failed; a failed child is stopped before the
    error propagates, so one crash fails one test. ``timeout`` (seconds) bounds the call.
    """
    global _child
    if _child is None or not _child.alive():
        if _child is not None:
            _child.stop()
        _child = None
        _child = TFChild()
    try:
        return _child.call(f"tests.interop.tf_side.{module}", function, args, kwargs, timeout)
    except (TFError, pickle.UnpicklingError):
        raise  # a whole answer was read: the child serves the next call
    except BaseException:
        # It died or overran, or the test was interrupted halfway through an answer: the next call
        # starts a new child rather than read this one's stale answer.
        _child.stop()
        _child = None
        raise


@atexit.register
def stop() -> None:
    """End this process's TensorFlow child, if it has one: at the end of the session (``tf_guard.py``),
    and at exit in case the session did not end."""
    global _child
    if _child is not None:
        _child.stop()
        _child = None


class tf_side:  # lower case: it reads as a function at the call site, tf = tf_side("files")
    """The functions of one ``tests/interop/tf_side`` module, called in the TensorFlow child.

    ``tf_side("files").load(prefix)`` is ``call("files", "load", prefix)``; ``timeout=`` bounds one call.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.module = f"tests.interop.tf_side.{name}"

    def __getattr__(self, function: str) -> Any:
        if function.startswith("_"):
            raise AttributeError(function)

        def remote(*args: Any, timeout: float = CALL_TIMEOUT, **kwargs: Any) -> Any:
            return call(self.name, function, *args, timeout=timeout, **kwargs)

        remote.__name__ = function
        return remote
