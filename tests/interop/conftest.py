"""Interop tests run real TensorFlow (from the ``test`` extra); they fail, not skip, without it."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def tf_log_lines(run: Callable[[], object]) -> list[str]:
    """The messages TensorFlow's logger gives while ``run`` runs (TF warns through absl logging)."""
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
