"""Checkpoints this process is still writing in the background, so that reading them waits.

An async save returns before its files exist and before the ``checkpoint`` state file names
it. A read in the same process of that prefix, or of its directory (whose state file still
names the previous checkpoint), would silently get the previous checkpoint. So the writer
announces each background write here (:func:`announce`), and every read resolves its path
through :func:`wait_for`, which waits for the writes in flight to that prefix or to that
directory, as ``Checkpoint.sync()`` would, before anything is read; another checkpoint named
by its own prefix is read at once.

The wait lasts as long as the write does, no longer: each of the write's own waits (a disk,
an object store's requests, the peers of a save of several processes) is bounded where it
happens. The writer's own thread never waits here: its write callbacks, and the manager's
bookkeeping after the write, read what that very write produced.

A failed background write is not raised here (``sync()`` and the next save raise it, once);
a read that waited for it warns that it reads whatever the failed save left in place (the
previous checkpoint, or the new one when only a write callback failed after it).
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field

__all__ = ["PendingWrite", "announce", "wait_for"]

_lock = threading.Lock()
_in_flight: list[PendingWrite] = []


def _key(path: str) -> str:
    # Only for comparing names with each other: a URL becomes a meaningless absolute path
    # ("/cwd/s3:/bucket/run"), but the same one for the writer and the reader, and
    # "dir/", "dir" and "./dir" become one name.
    return os.path.abspath(os.fspath(path))


@dataclass(eq=False)
class PendingWrite:
    """One background write of the checkpoint at ``prefix``, on ``thread``."""

    prefix: str
    thread: threading.Thread
    _done: threading.Event = field(default_factory=threading.Event)
    _error: BaseException | None = None

    def finish(self, error: BaseException | None = None) -> None:
        """The write ended (``error``: how it failed); readers waiting for it go on."""
        self._error = error
        with _lock:
            if self in _in_flight:
                _in_flight.remove(self)
        self._done.set()

    def _covers(self, key: str) -> bool:
        # The prefix itself, or its directory (whose state file names it once written). Another
        # prefix in that directory is read at once: it is a checkpoint asked for by its name.
        mine = _key(self.prefix)
        return key in (mine, os.path.dirname(mine))


def announce(prefix: str, thread: threading.Thread) -> PendingWrite:
    """Record that ``thread`` is about to write the checkpoint at ``prefix``; call
    :meth:`PendingWrite.finish` when it is complete, whatever the outcome."""
    write = PendingWrite(prefix, thread)
    with _lock:
        _in_flight.append(write)
    return write


def wait_for(path: str) -> None:
    """Before reading ``path`` (a prefix or a directory): wait for this process's background
    writes there, except on the thread that performs them (see the module docstring)."""
    key = _key(path)
    current = threading.current_thread()
    with _lock:
        waits = [w for w in _in_flight if w.thread is not current and w._covers(key)]
    for write in waits:
        write._done.wait()
        if write._error is not None:
            warnings.warn(
                f"reading {path}: the asynchronous save of {write.prefix} failed ({write._error!r}); what is read "
                "is what that save left in place; sync() or the next save raises the failure",
                RuntimeWarning,
                stacklevel=3,
            )
