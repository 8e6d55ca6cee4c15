"""Keeping the writers of async saves off the CPU of the thread that saves (issue 44).

A training loop that calls ``save()`` holds one CPU; a writer thread or writer process the
scheduler lets onto that CPU takes its time from the loop. Traced on a 2-CPU VM, a loop whose
writers could run anywhere was preempted thousands of times in seconds; kept to the other CPU,
they left it alone (PERFORMANCE.md, "Saves beside a training loop"). So an async save notes the
CPU ``save()`` runs on (:func:`current`), and its writer thread, and the writer process with it,
run on the other CPUs this process may use (:func:`keep_off`). With one CPU nothing changes.

The CPUs "this process may use" are those of the importing thread, of the main thread and of the
writer thread: a loop that pins its own thread to one CPU after importing trackpoint passes that
pin on to the threads it starts, and the writers must not stay there with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

__all__ = ["current", "follow", "keep_off"]

_LINUX = sys.platform.startswith("linux") and hasattr(os, "sched_getaffinity")
_STARTING: set[int] = os.sched_getaffinity(0) if _LINUX else set()
# A PyDLL call keeps the GIL: a CDLL call releases it, and the training thread would then wait
# to get it back (up to the 5 ms switch interval) at every save.
_sched_getcpu = getattr(ctypes.PyDLL(None), "sched_getcpu", None) if _LINUX else None


def current() -> int | None:
    """The CPU the calling thread runs on now; None where the system does not tell.

    Examples:
        >>> cpu = current()
        >>> cpu is None or cpu >= 0
        True
    """
    if _sched_getcpu is None:
        return None
    cpu = _sched_getcpu()
    return cpu if cpu >= 0 else None


def keep_off(cpu: int | None) -> None:
    """Run the calling thread on the CPUs this process may use but ``cpu`` (none: no change)."""
    if cpu is None or not _LINUX:
        return
    others = (_STARTING | os.sched_getaffinity(0) | os.sched_getaffinity(os.getpid())) - {cpu}
    if others:
        with contextlib.suppress(OSError):  # a set the system refuses (a cpuset): as before
            os.sched_setaffinity(0, others)


def follow(pid: int) -> None:
    """Give process ``pid`` (the writer process) the CPUs of the calling thread."""
    if _LINUX:
        with contextlib.suppress(OSError):  # the process is gone: its write fails on its own
            os.sched_setaffinity(pid, os.sched_getaffinity(0))
