"""Write an ordered list of ``(key, value)`` tensors as one bundle."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from trackpoint._format.bundle_writer import BundleWriter

__all__ = ["write_bundle"]


def write_bundle(prefix: str, tensors: Iterable[tuple[str, Any]]) -> str:
    """Write the tensors in order into ``prefix.data-00000-of-00001`` and the index; return ``prefix``."""
    writer = BundleWriter(os.fspath(prefix))
    for key, value in tensors:
        writer.add(key, value)
    writer.finish()
    return prefix
