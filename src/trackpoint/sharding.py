"""Sharding policies for ``CheckpointOptions(experimental_sharding_callback=...)``.

Examples:
    >>> import trackpoint as tp
    >>> options = tp.CheckpointOptions(
    ...     experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(max_shard_size=64 << 20))
"""

from trackpoint._saving.sharding_policies import (
    MaxShardSizePolicy,
    Shard,
    ShardableTensor,
    ShardByTaskPolicy,
    ShardingCallback,
)

# The name TF's documentation uses for the default policy.
ShardByDevicePolicy = ShardByTaskPolicy

__all__ = [
    "MaxShardSizePolicy",
    "Shard",
    "ShardByDevicePolicy",
    "ShardByTaskPolicy",
    "ShardableTensor",
    "ShardingCallback",
]
