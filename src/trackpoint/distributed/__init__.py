"""Several processes, one TensorFlow checkpoint.

Call ``save``/``write`` (or ``CheckpointManager.save``) on every rank of a job; the ranks
agree on the objects, write every replicated tensor once (balanced by bytes) and every
:class:`ShardedVariable` block by its holder, each rank into data files of its own, and one
rank commits the index last. The group is ``CheckpointOptions(coordinator=...)``, or the
initialized default torch.distributed group, or the initialized ``jax.distributed`` job. Restores need no coordination: each rank
reads what its objects hold, whatever the number of ranks that saved.

Names:
    ShardedVariable: a block of a larger tensor (saved as a TF slice).
    Coordinator: the protocol a save coordinates through (gather, broadcast, barrier, key-value).
    KeyValueStore, StoreCoordinator: a Coordinator built on a store that sets and waits for keys.
    TorchCoordinator: the torch.distributed engine (imports torch).
    JaxCoordinator: the jax.distributed engine (imports jax).

Examples:
    >>> import numpy as np
    >>> from trackpoint.distributed import ShardedVariable
    >>> ShardedVariable(np.ones((2, 4)), full_shape=(8, 4), offsets=(2, 0)).bounds
    ((2, 4), (0, 4))
"""

from __future__ import annotations

from typing import Any

from trackpoint._pipeline import ShardedVariable, register_resolver
from trackpoint.distributed._coordinator import Coordinator, KeyValueStore, StoreCoordinator
from trackpoint.distributed._resolve import committer_for

# Every later save asks this package whether it coordinates with other processes. The save layer
# imports it on first need (see trackpoint._saving.committer), so a save joins an initialized
# torch.distributed group without its caller importing this package.
register_resolver(committer_for)

__all__ = ["Coordinator", "JaxCoordinator", "KeyValueStore", "ShardedVariable", "StoreCoordinator", "TorchCoordinator"]


def __getattr__(name: str) -> Any:
    if name == "TorchCoordinator":  # imports torch: only when asked for
        from trackpoint.distributed._torch import TorchCoordinator

        return TorchCoordinator
    if name == "JaxCoordinator":  # imports jax: only when asked for
        from trackpoint.distributed._jax import JaxCoordinator

        return JaxCoordinator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
