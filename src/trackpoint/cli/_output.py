"""What the ``trackpoint`` command prints: escaped text, JSON, dtypes and shapes, a progress bar.

Everything printed that comes from a checkpoint or a path (keys, object names, file names, error
messages naming them) goes through :func:`out`, which escapes control and other non-printable
characters: a crafted key cannot move the cursor, erase a line or reorder text.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TextIO

import numpy as np

from trackpoint._io import MAX_RANK, bounded_json, printable

__all__ = ["Progress", "dtype_name", "json_value", "out", "print_json", "shape_text"]


def out(text: str, stream: TextIO | None = None) -> None:
    """Print ``text``, escaped line by line; the one way the command prints.

    Examples:
        >>> out("key\\x1b[2J")
        key\\x1b[2J
    """
    print("\n".join(printable(line) for line in text.split("\n")), file=stream or sys.stdout)


def dtype_name(dtype: np.dtype) -> str:
    """TensorFlow's short dtype name (``tf.DType.name``) for a reader dtype.

    Examples:
        >>> dtype_name(np.dtype("float32")), dtype_name(np.dtype(object))
        ('float32', 'string')
    """
    return "string" if dtype == np.dtype(object) else dtype.name


def shape_text(shape: Sequence[int]) -> str:
    """A shape as the listing prints it.

    Examples:
        >>> shape_text((3, 2)), shape_text(())
        ('[3,2]', '[]')
    """
    return "[" + ",".join(str(d) for d in shape) + "]"


def json_value(value: object) -> object:
    """A JSON-safe rendering: bytes as text (undecodable bytes escaped), non-finite floats as strings.

    Examples:
        >>> json_value(np.array([1.0, np.inf])), json_value(b"a\\xff")
        ([1.0, 'inf'], 'a\\\\xff')
    """
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return [json_value(v) for v in value.tolist()] if value.ndim else json_value(value.item())
        return json_value(value.astype(np.float64).tolist() if value.dtype.kind == "V" else value.tolist())
    if isinstance(value, np.generic):
        return json_value(value.item())
    if isinstance(value, list):
        return [json_value(v) for v in value]
    if isinstance(value, complex):
        return [json_value(value.real), json_value(value.imag)]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def print_json(doc: object) -> None:
    """Print ``doc`` as indented JSON (``ensure_ascii`` escapes control characters)."""
    # A value nests as deep as its tensor's rank (at most MAX_RANK, as the reader holds it), in
    # a document of three levels, and a complex element one more.
    out(bounded_json.dumps(doc, "the output", max_depth=MAX_RANK + 4, indent=2))


class Progress:
    """A one-line progress bar on stderr, shown only when stderr is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.enabled = self.stream.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        width = 30
        filled = width * done // total
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {100 * done // total:3d}%")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * (len(self.label) + 40) + "\r")
            self.stream.flush()
