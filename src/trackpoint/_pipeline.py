"""The second and last door from the edges to the core: the save pipeline's pieces for adapters that take part in a save.

:mod:`trackpoint.distributed` (several processes writing one checkpoint) and the storage
under ``torch.distributed.checkpoint`` write shards, validate a sharding and commit many
processes' data files themselves; they reach those pieces of ``_saving`` (and the
``ShardedVariable`` the multi-process save splits over) only through this module, and
:mod:`trackpoint.distributed` plugs its committer into every save here
(``register_resolver``, see :mod:`trackpoint._saving.committer`). File I/O
goes through :mod:`trackpoint._io`; nothing else of the core is open to an edge
(``tests/test_layers.py`` pins it).

Internal: a name is here because an edge uses it. It defines nothing of its own.

Examples:
    >>> from trackpoint import _pipeline
    >>> _pipeline.MAX_WRITER_THREADS
    4
"""

from __future__ import annotations

from trackpoint._saving import rank_files, wire
from trackpoint._saving.committer import register_resolver
from trackpoint._saving.sharding_policies import validate_shards
from trackpoint._saving.write import MAX_WRITER_THREADS, shardable_tensors, write_remedy, write_shard
from trackpoint._tracking.sharded import ShardedVariable

__all__ = [
    "MAX_WRITER_THREADS",
    "ShardedVariable",
    "rank_files",
    "register_resolver",
    "shardable_tensors",
    "validate_shards",
    "wire",
    "write_remedy",
    "write_shard",
]
