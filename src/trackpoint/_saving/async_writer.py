"""One background thread that performs a checkpoint's writes, one at a time.

``submit`` waits for the write in flight (a second save blocks until the first is done)
and re-raises its failure, then hands the new write over and returns. ``sync`` waits and
re-raises. Pending writes are finished when the interpreter exits. Each write is announced
to :mod:`trackpoint._storage.pending_writes` until it ends, so that a read of its prefix or
directory in this process waits for it instead of finding the previous checkpoint.

The thread holds the queue and a box for its failure, never the writer: a checkpoint that
is dropped takes its writer with it, and the thread then finishes what it was given and
ends, instead of waiting forever for work that cannot come.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable

from trackpoint._storage import pending_writes

__all__ = ["AsyncWriter"]

_log = logging.getLogger("trackpoint")
_live: weakref.WeakSet[AsyncWriter] = weakref.WeakSet()
_threads: set[threading.Thread] = set()  # still running, writers alive or not: joined at exit
_threads_lock = threading.Lock()

_Task = Callable[[], None]


def _run(tasks: queue.Queue[_Task | None], errors: list[BaseException]) -> None:
    try:
        while True:
            task = tasks.get()
            try:
                if task is None:
                    if errors:  # the writer is gone or the interpreter exits: no sync() will raise it
                        _log.error("A background checkpoint write failed and no sync() reported it", exc_info=errors[0])
                    return
                task()
            except BaseException as exc:  # noqa: BLE001 - kept for sync() and the next save
                errors[:] = [exc]
            finally:
                # Drop the finished task now: its snapshot must not keep old arrays alive
                # until the next save arrives.
                task = None
                tasks.task_done()
    finally:
        with _threads_lock:
            _threads.discard(threading.current_thread())


class AsyncWriter:
    def __init__(self) -> None:
        self._queue: queue.Queue[_Task | None] = queue.Queue(maxsize=1)
        self._errors: list[BaseException] = []  # the latest failure, shared with the thread
        self._thread = threading.Thread(
            target=_run, args=(self._queue, self._errors), name="trackpoint-async-save", daemon=True
        )
        with _threads_lock:
            _threads.add(self._thread)
        self._thread.start()
        _live.add(self)
        # When the writer is collected, the thread ends after the work it has; at exit,
        # live writers are closed by _finish_pending_writes instead.
        weakref.finalize(self, self._queue.put, None).atexit = False

    def sync(self) -> None:
        """Wait for the pending write; re-raise (once) the failure of a background write."""
        self._queue.join()
        if self._errors:
            error = self._errors.pop()
            raise error

    def submit(self, task: _Task, prefix: str) -> None:
        """Wait for the previous write (re-raising its failure), then start ``task``, which
        writes the checkpoint at ``prefix``, in the background."""
        self.sync()
        pending = pending_writes.announce(prefix, self._thread)

        def announced() -> None:
            try:
                task()
            except BaseException as exc:
                pending.finish(exc)
                raise
            pending.finish()

        self._queue.put(announced)

    def close(self) -> None:
        """Finish pending work and stop the thread (errors stay for ``sync``)."""
        if self._thread.is_alive():
            self._queue.join()
            self._queue.put(None)
            self._thread.join()


@atexit.register
def _finish_pending_writes() -> None:
    for writer in list(_live):
        writer.close()
    with _threads_lock:
        orphans = list(_threads)
    for thread in orphans:  # writers already collected: their threads finish their last write
        thread.join()
