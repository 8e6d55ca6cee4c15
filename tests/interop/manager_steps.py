"""One run of ``CheckpointManager`` saves, given a library's classes (TensorFlow's in a TensorFlow child, trackpoint's in the test), so
that both run the very same steps."""

from __future__ import annotations

import os
from typing import Any


def run_steps(
    classes: tuple[Any, Any, Any], directory: str, interval: int | None, last: int | None, check: bool, steps: list[int]
) -> tuple[list[int], list[str]]:
    """The steps at which ``save()`` wrote a checkpoint, and the checkpoints kept (base names).

    ``classes`` are the library's ``(Variable, Checkpoint, CheckpointManager)``.
    """
    variable, checkpoint, checkpoint_manager = classes
    step = variable(0, dtype="int64")
    manager = checkpoint_manager(
        checkpoint(step=step),
        directory,
        max_to_keep=None,
        step_counter=step if interval else None,
        checkpoint_interval=interval,
        last_checkpoint_step=last,
    )
    saved = []
    for value in steps:
        step.assign(value)
        if manager.save(check_interval=check) is not None:
            saved.append(value)
    return saved, [os.path.basename(path) for path in manager.checkpoints]
