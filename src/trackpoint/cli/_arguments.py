"""Argument types of the ``trackpoint`` command that refuse a bad value while parsing.

argparse reports a refusal as one line naming the option and exits with status 2, before any
checkpoint is opened.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["tolerance"]


def tolerance(text: str) -> float:
    """A ``--rtol``/``--atol`` value: a finite number >= 0.

    ``float()`` alone takes ``nan``, ``inf`` and negative numbers, with which ``numpy.isclose``
    only warns and then calls every value close: two different checkpoints came out equal.

    Example:
        >>> tolerance("1e-6")
        1e-06
        >>> tolerance("nan")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: must be a finite number >= 0, not 'nan'
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}")
    return value
