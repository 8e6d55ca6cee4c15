"""Pausing Python's cyclic garbage collector while a save or restore builds many objects."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off cyclic collection for the duration (re-entrant, thread-safe).

    Saving or restoring tens of thousands of variables allocates hundreds of thousands of
    short-lived, acyclic objects; each allocation burst triggers collections that scan every
    live object of the process (TensorFlow's, say): see PERFORMANCE.md for what that cost.
    Reference counting still frees everything at once; the collector resumes afterwards.
    """
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
