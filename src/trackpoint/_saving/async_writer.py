"""One background thread that performs a checkpoint's writes, one at a time.

``submit`` waits for the write in flight (a second save blocks until the first is done)
and re-raises its failure, then hands the new write over and returns. ``sync`` waits and
re-raises. Pending writes are finished when the interpreter exits.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Callable

__all__ = ["AsyncWriter"]

_live: weakref.WeakSet[AsyncWriter] = weakref.WeakSet()


class AsyncWriter:
    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="trackpoint-async-save", daemon=True)
        self._thread.start()
        _live.add(self)

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            try:
                if task is None:
                    return
                task()
            except BaseException as exc:  # kept for sync() and the next save
                self._error = exc
            finally:
                # Drop the finished task now: its snapshot must not keep old arrays alive
                # until the next save arrives.
                task = None
                self._queue.task_done()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def sync(self) -> None:
        """Wait for the pending write; re-raise (once) the failure of a background write."""
        self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def submit(self, task: Callable[[], None]) -> None:
        """Wait for the previous write (re-raising its failure), then start ``task`` in the background."""
        self.sync()
        self._queue.put(task)

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
