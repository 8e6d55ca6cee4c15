"""Work on helper threads, for file I/O and checksums (both release the GIL).

Plain threads rather than ``concurrent.futures``: an executor refuses new work once the
interpreter has begun to exit, and that is when pending async saves are completed (see
``trackpoint._saving.async_writer``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Background", "default_workers", "parallel_map"]

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Threads for one job's file I/O, copies or checksums: up to four, no more than the cores.

    Examples:
        >>> 1 <= default_workers() <= 4
        True
    """
    return min(4, os.cpu_count() or 1)


class Background(Generic[R]):
    """Run ``function()`` on a thread of its own; :meth:`result` waits, then returns or re-raises.

    Examples:
        >>> Background(lambda: 6 * 7).result()
        42
    """

    def __init__(self, function: Callable[[], R], name: str = "trackpoint-io") -> None:
        self._value: R | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = function()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                self._error = exc

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait, without raising."""
        self._thread.join()

    def result(self) -> R:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def parallel_map(function: Callable[[T], R], items: Sequence[T], max_workers: int) -> list[R]:
    """``[function(item) for item in items]`` on up to ``max_workers`` threads.

    Every call runs to the end before the first failure (in item order) is re-raised, so no
    thread is left working on files the caller is about to clean up.

    Examples:
        >>> parallel_map(lambda x: x * x, [1, 2, 3], 2)
        [1, 4, 9]
    """
    if max_workers <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    results: list[R | None] = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)

    def work(first: int, step: int) -> None:
        for i in range(first, len(items), step):
            try:
                results[i] = function(items[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised once every call is done
                errors[i] = exc

    workers = min(max_workers, len(items))
    helpers = [Background(functools.partial(work, first, workers)) for first in range(1, workers)]
    work(0, workers)
    for helper in helpers:
        helper.join()
    for error in errors:
        if error is not None:
            raise error
    return results  # type: ignore[return-value]
