"""TensorFlow's sharding policy and device strings for test_tf_options.py."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def write_sharded(prefix: str, values: dict[str, np.ndarray], max_shard_size: int) -> None:
    """One ``tf.Variable`` per value, written with ``MaxShardSizePolicy(max_shard_size)``."""
    tf.train.Checkpoint(**{k: tf.Variable(v) for k, v in values.items()}).write(
        prefix,
        tf.train.CheckpointOptions(
            experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(max_shard_size=max_shard_size)
        ),
    )


def read_like(prefix: str, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Zero variables shaped like ``values`` (``text``: two empty strings) read ``prefix`` with
    ``assert_consumed()``: their values after."""
    target = {k: tf.Variable(tf.zeros_like(v)) if k != "text" else tf.Variable([b"", b""]) for k, v in values.items()}
    tf.train.Checkpoint(**target).read(prefix).assert_consumed()
    return {name: variable.numpy() for name, variable in target.items()}


def device_specs(specs: list[str]) -> dict[str, tuple | None]:
    """``tf.DeviceSpec.from_string`` of each spec: (job, replica, task, device_type, device_index,
    to_string()), or None where it raises ValueError."""
    out: dict[str, tuple | None] = {}
    for spec in specs:
        try:
            theirs = tf.DeviceSpec.from_string(spec)
        except ValueError:
            out[spec] = None
            continue
        out[spec] = (
            theirs.job,
            theirs.replica,
            theirs.task,
            theirs.device_type,
            theirs.device_index,
            theirs.to_string(),
        )
    return out
