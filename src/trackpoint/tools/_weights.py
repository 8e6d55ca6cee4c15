"""The weights of ``tp.average``: uniform, an exponential moving average, or one per checkpoint."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from trackpoint.errors import InvalidArgumentError

__all__ = ["weights_for"]


def weights_for(count: int, weights: Any) -> list[float]:
    """The normalized weights of ``count`` checkpoints for a ``weights`` argument of :func:`average`.

    ``None`` or ``"uniform"``: equal. ``("exponential", decay)`` (or a list of the two): an exponential moving
    average over the checkpoints in order, started at the first: the last has weight
    ``1 - decay``, the one before ``(1 - decay) * decay`` and so on, the first the rest
    (``decay ** (count - 1)``). A list: one non-negative weight per checkpoint, normalized.

    Examples:
        >>> weights_for(3, ("exponential", 0.5))
        [0.25, 0.25, 0.5]

    Raises:
        InvalidArgumentError: A malformed weights argument.
    """
    if weights is None or (isinstance(weights, str) and weights == "uniform"):
        return [1.0 / count] * count
    if isinstance(weights, (tuple, list)) and len(weights) == 2 and _is_exponential(weights[0]):
        return _exponential(count, weights[1])
    if isinstance(weights, str) or not isinstance(weights, (Sequence, np.ndarray)):
        raise InvalidArgumentError(
            f"average: weights {weights!r}: pass None, 'uniform', ('exponential', decay) or one number per checkpoint"
        )
    return _listed(count, weights)


def _exponential(count: int, decay: Any) -> list[float]:
    if not _is_real(decay) or not 0.0 <= float(decay) < 1.0:
        raise InvalidArgumentError(f"average: the exponential decay must be a number in [0, 1), not {decay!r}")
    decay = float(decay)
    out = [(1.0 - decay) * decay ** (count - 1 - i) for i in range(count)]
    out[0] = decay ** (count - 1)
    return out


def _listed(count: int, weights: Sequence[Any] | np.ndarray) -> list[float]:
    for position, weight in enumerate(weights):
        if not _is_real(weight):
            raise InvalidArgumentError(
                f"average: weight {position} ({weight!r}) is not a real number; give one finite, non-negative "
                "number per checkpoint, or ('exponential', decay) for a moving average"
            )
    values = [float(w) for w in weights]
    if len(values) != count or any(not np.isfinite(w) or w < 0 for w in values) or sum(values) <= 0:
        raise InvalidArgumentError(
            f"average: {len(values)} weights {values} for {count} checkpoints; give one finite, non-negative "
            "weight per checkpoint, not all zero"
        )
    total = sum(values)
    return [w / total for w in values]


def _is_exponential(value: Any) -> bool:
    return isinstance(value, str) and value == "exponential"


def _is_real(value: Any) -> bool:
    """A real number (Python or numpy), not a bool, a string or a complex number."""
    return isinstance(value, (numbers.Real, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
