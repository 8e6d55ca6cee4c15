"""TensorFlow's log lines (it warns through absl logging, not ``warnings``), for the other tf_side modules."""

from __future__ import annotations

import logging
from collections.abc import Callable


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
