"""``CheckpointManager``'s ``checkpoint_interval``: whether the step moved on enough to save again."""

from __future__ import annotations

from typing import Any

import numpy as np

from trackpoint.errors import InvalidArgumentError

__all__ = ["Interval", "as_int"]


def as_int(value: Any) -> int:
    """An int from an int, a numpy value or a ``tp.Variable``.

    Examples:
        >>> as_int(np.int64(3))
        3
    """
    if hasattr(value, "numpy"):
        value = value.numpy()
    return int(np.asarray(value))


def _as_step(value: Any) -> int:
    """``last_checkpoint_step`` as an int: an int, a numpy integer or an integer ``tp.Variable``.

    Raises:
        InvalidArgumentError: Anything else (a float, a string, an array of several values).
    """
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if array.shape != () or array.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"last_checkpoint_step must be an integer step number (an int or an integer variable), got {value!r}; "
            "pass the step at which the last checkpoint was saved, or None"
        )
    return int(array)


class Interval:
    """Save only once ``step_counter`` moved ``every`` steps past the last save, as TF's manager does.

    Args:
        step_counter: A variable (or int-like) read at each save.
        every: The interval in steps; None saves every time (the counter is never read).
        last_step: The step of the last checkpoint saved, or None: the first save goes through.

    Raises:
        InvalidArgumentError: ``every`` without a ``step_counter``, or a ``last_step`` that is
            not an integer.

    Examples:
        >>> interval = Interval(step_counter=10, every=5, last_step=8)
        >>> interval.due(check_interval=True), interval.due(check_interval=False)
        (False, True)
    """

    def __init__(self, step_counter: Any, every: int | None, last_step: Any) -> None:
        if every is not None and step_counter is None:
            raise InvalidArgumentError("`step_counter` should be passed if `checkpoint_interval` is not None.")
        self.step_counter = step_counter
        self.every = every
        # TF reads last_checkpoint_step only when there is an interval to count from it.
        self.last_step: int | None = _as_step(last_step) if every is not None and last_step is not None else None

    def due(self, check_interval: bool) -> bool:
        """Whether a save is due now; if so, its step becomes the last saved. Without
        ``check_interval`` any step past the last one is due."""
        if self.every is None:
            return True
        step = as_int(self.step_counter)
        if self.last_step is not None:
            if step == self.last_step:
                return False
            if check_interval and step < self.last_step + self.every:
                return False
        self.last_step = step
        return True

    def restored(self) -> None:
        """A checkpoint was restored: count the interval from the step it holds."""
        if self.every is not None:
            self.last_step = as_int(self.step_counter)
