"""What the ``trackpoint.reuse`` logger says: which saves and restores reused the previous
layout or bindings, and the reason when one did not."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class ReuseLog(logging.Handler):
    """Collects the messages of the ``trackpoint.reuse`` logger (a real handler, at DEBUG)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def clear(self) -> None:
        self.messages.clear()

    def _restores(self) -> list[str]:
        return [m for m in self.messages if "walking the object graph" in m or "repeating the bindings" in m]

    def repeated(self) -> bool:
        """Every restore since the last :meth:`clear` repeated its previous bindings (and there was one)."""
        restores = self._restores()
        return bool(restores) and all("repeating the bindings" in m for m in restores)

    def walked(self, reason: str = "") -> bool:
        """A restore since the last :meth:`clear` walked the graph, for a reason containing ``reason``."""
        return any("walking the object graph" in m and reason in m for m in self._restores())

    def not_kept(self, reason: str = "") -> bool:
        """A restore's bindings were not kept for the next, for a reason containing ``reason``."""
        return any("not kept for the next" in m and reason in m for m in self.messages)

    def saves(self) -> list[str]:
        """What each save said: reused its layout, or walked (and why)."""
        return [m for m in self.messages if "save" in m and ("walking the objects" in m or "reusing" in m
                                                             or "layout is not kept" in m)]


@contextmanager
def reuse_log() -> Iterator[ReuseLog]:
    logger = logging.getLogger("trackpoint.reuse")
    handler = ReuseLog()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
