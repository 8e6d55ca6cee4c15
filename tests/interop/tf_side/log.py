"""TensorFlow's log lines (it warns through absl logging, not ``warnings``), for the other tf_side modules."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def tf_log_lines(run: Callable[[], object]) -> list[str]:
    """The messages TensorFlow's logger gives while ``run`` runs."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("tensorflow")
    logger.addHandler(handler)
    try:
        run()
    finally:
        logger.removeHandler(handler)
    return lines


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off, as the test's ``no_gc`` fixture has it in the pytest process."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
