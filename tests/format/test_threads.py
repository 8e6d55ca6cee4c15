"""Helper threads: results in order, every call finished before the first failure is raised."""

from __future__ import annotations

import threading
import time

import pytest

from trackpoint._format.threads import Background, parallel_map


def test_parallel_map_runs_on_several_threads_in_order() -> None:
    # The thread objects, held: a thread's ident can be reused once it has ended, and on a loaded
    # machine one helper may end before the last starts.
    seen: dict[int, threading.Thread] = {}

    def work(x: int) -> int:
        thread = threading.current_thread()
        seen[id(thread)] = thread
        time.sleep(0.01)
        return x * 10

    assert parallel_map(work, list(range(8)), 4) == [x * 10 for x in range(8)]
    assert len(seen) == 4


def test_parallel_map_finishes_every_call_then_raises_the_first_failure() -> None:
    done: list[int] = []

    def work(x: int) -> int:
        if x in (2, 5):
            raise ValueError(f"item {x}")
        time.sleep(0.01)
        done.append(x)
        return x

    with pytest.raises(ValueError, match="item 2"):
        parallel_map(work, list(range(8)), 3)
    assert sorted(done) == [0, 1, 3, 4, 6, 7]


def test_background_reraises() -> None:
    def fail() -> None:
        raise OSError("disk full")

    task = Background(fail)
    task.join()
    with pytest.raises(OSError, match="disk full"):
        task.result()
