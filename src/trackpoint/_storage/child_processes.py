"""Helper processes of ours: started so that they die with this process, and errors sent between them.

Two helpers use this: the writer process of async saves (:mod:`trackpoint._saving.writer_process`)
and the download process of restores from S3 (:mod:`.download_process`). Each is this
interpreter running one of our modules' ``main(fd)`` with ``fd`` its end of a pipe or socket,
and dies with its parent (``PR_SET_PDEATHSIG``), so a killed process leaves no helper behind.

Examples:
    >>> from trackpoint.errors import DataLossError, NotFoundError
    >>> raw = encode_error(NotFoundError("no ckpt", path="s3://b/c"), DataLossError, "reading", "s3://b/c")
    >>> error = decode_error(raw)
    >>> type(error).__name__, error.path
    ('NotFoundError', 's3://b/c')
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

from trackpoint import errors
from trackpoint.errors import CheckpointError

__all__ = ["SPAWN_TIMEOUT", "STOP_TIMEOUT", "decode_error", "die_with_parent", "encode_error", "spawn"]

SPAWN_TIMEOUT = 60.0  # seconds for starting a child (a fork and exec; seconds on a loaded machine)
STOP_TIMEOUT = 10.0  # seconds a child is given to leave once its pipe or socket closes, then it is killed
_PR_SET_PDEATHSIG = 1


def spawn(module: str, fd: int, pipes: bool = True) -> subprocess.Popen[bytes]:
    """Start ``module.main(fd)`` in a new interpreter, with ``fd`` passed on, and pipes on its stdin
    and stdout (``pipes``; else both are ``/dev/null``).

    It is started from a thread that lives as long as this process: ``PR_SET_PDEATHSIG`` fires
    when the *thread* that started the child ends, not the process, so a child started by a
    checkpoint's writer thread would die with that checkpoint. The spawning thread is a daemon:
    never joined, it outlives the interpreter's exit handlers (where pending saves are finished)
    and ends only with the process.

    Raises:
        OSError: The child could not be started within :data:`SPAWN_TIMEOUT`.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = queue.SimpleQueue()
            threading.Thread(
                target=_spawn_forever, args=(_spawner,), name="trackpoint-helper-spawner", daemon=True
            ).start()
    code = f"import sys; sys.path[:0] = sys.argv[2:]; from {module} import main; main(int(sys.argv[1]))"
    answer: queue.SimpleQueue[Any] = queue.SimpleQueue()
    _spawner.put(([sys.executable, "-c", code, str(fd), *sys.path], fd, pipes, answer))
    try:
        result = answer.get(timeout=SPAWN_TIMEOUT)
    except queue.Empty:
        raise OSError(f"the helper process did not start within {SPAWN_TIMEOUT:.0f} s") from None
    if isinstance(result, BaseException):
        raise result
    return result


def _spawn_forever(requests: queue.SimpleQueue[Any]) -> None:
    while True:
        command, fd, pipes, answer = requests.get()
        stream = subprocess.PIPE if pipes else subprocess.DEVNULL
        try:
            answer.put(subprocess.Popen(command, stdin=stream, stdout=stream, pass_fds=(fd,), close_fds=True))
        except OSError as exc:
            answer.put(exc)


_spawner: queue.SimpleQueue[Any] | None = None
_spawner_lock = threading.Lock()


def _forget_spawner() -> None:
    """In a forked copy of this process: the spawning thread was not copied; the next spawn starts one."""
    global _spawner, _spawner_lock
    _spawner, _spawner_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_spawner)


def die_with_parent() -> bool:
    """In a child: be killed when the parent dies (Linux); False when the parent is gone already."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    return os.getppid() != 1


def encode_error(error: BaseException | None, fallback: type[CheckpointError], doing: str, path: str) -> bytes:
    """``error`` as JSON that :func:`decode_error` makes again: null for None, a ``trackpoint.errors``
    class with its arguments, path and key; any other exception as a ``fallback`` of ``path``
    whose message starts with ``doing``."""
    if error is None:
        return b"null"
    if not isinstance(error, CheckpointError):
        error = fallback(f"{doing}: {type(error).__name__}: {error}", path=path)
    args = [a if isinstance(a, (str, int, float)) or a is None else str(a) for a in error.args]
    fields = {"class": type(error).__name__, "fallback": fallback.__name__, "args": args}
    return json.dumps({**fields, "path": error.path, "key": error.key}).encode()


def decode_error(raw: bytes) -> CheckpointError | None:
    """The error an :func:`encode_error` answer carries (its fallback class if the class is unknown)."""
    answer = json.loads(raw)
    if answer is None:
        return None
    cls = _error_class(answer["class"]) or _error_class(answer.get("fallback")) or errors.DataLossError
    return cls(*answer["args"], path=answer["path"], key=answer["key"])


def _error_class(name: Any) -> type[CheckpointError] | None:
    cls = getattr(errors, str(name), None)
    return cls if isinstance(cls, type) and issubclass(cls, CheckpointError) else None
