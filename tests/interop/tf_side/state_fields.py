"""How ``tf.train.get_checkpoint_state``'s repeated fields compare with lists (test_tf_state_fields.py)."""

from __future__ import annotations

import tensorflow as tf


def repeated_fields(directory: str) -> dict[str, list]:
    """The state's repeated fields as lists, and its scalar fields."""
    state = tf.train.get_checkpoint_state(directory)
    return {
        "all_model_checkpoint_paths": list(state.all_model_checkpoint_paths),
        "all_model_checkpoint_timestamps": list(state.all_model_checkpoint_timestamps),
        "model_checkpoint_path": state.model_checkpoint_path,
        "last_preserved_timestamp": state.last_preserved_timestamp,
    }


def comparisons(directory: str, cases: list[tuple[str, list]]) -> list[tuple[bool, bool, bool]]:
    """For each (field, other): ``field == other``, ``other == field`` and ``field != other`` of the
    state's repeated field (a protobuf container, not a list)."""
    state = tf.train.get_checkpoint_state(directory)
    out = []
    for field, other in cases:
        value = getattr(state, field)
        out.append((value == other, other == value, value != other))
    return out
