"""Which ranks a save coordinates with: the option given, or the initialized torch.distributed group or jax.distributed job.

:func:`committer_for` is what this package registers with the save pipeline (see
:mod:`trackpoint._saving.committer`) when it is imported.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from trackpoint.distributed._coordinator import Coordinator

if TYPE_CHECKING:
    from trackpoint.distributed._save import CoordinatedCommitter

__all__ = ["committer_for", "coordinator_for"]


def committer_for(option: Any, io_rank: int | None) -> CoordinatedCommitter | None:
    """The committer of a save with ``CheckpointOptions(coordinator=option)``, whose
    ``experimental_io_device`` names task ``io_rank``; None when this process saves alone."""
    coordinator = coordinator_for(option)
    if coordinator is None:
        return None
    from trackpoint.distributed._save import CoordinatedCommitter  # the writing modules: only once coordinating

    return CoordinatedCommitter(coordinator, io_rank)


def coordinator_for(option: Any) -> Coordinator | None:
    """The coordinator of a save with ``CheckpointOptions(coordinator=option)``; None for one process.

    None (the default) picks up torch.distributed when this process imported it and its
    default group of two or more ranks is initialized, else a ``jax.distributed`` job of two or
    more processes; ``False`` saves alone whatever runs;
    a torch process group coordinates its ranks; a :class:`Coordinator` is used as it is.
    """
    if option is False:
        return None
    if option is None:
        found: Coordinator | None = None
        if "torch.distributed" in sys.modules:  # never imported: no group can be initialized
            from trackpoint.distributed._torch import default_coordinator

            found = default_coordinator()
        if found is None and "jax" in sys.modules:
            from trackpoint.distributed._jax import default_coordinator as default_jax_coordinator

            found = default_jax_coordinator()
        return found
    if isinstance(option, Coordinator):
        return option if option.world_size > 1 else None
    from trackpoint.distributed._torch import TorchCoordinator

    return TorchCoordinator(group=option)
