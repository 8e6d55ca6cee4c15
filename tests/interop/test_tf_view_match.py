"""CheckpointView.match warns where tf.train.CheckpointView.match logs, and matches the same nodes."""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf

import trackpoint as tp
from tests.helpers import tf_log_lines

PHRASE = "Inconsistent references when matching the checkpoint into this object graph."


@pytest.mark.parametrize("shared_live", [False, True], ids=["two live objects", "one live object"])
def test_inconsistent_references_are_reported_as_tf_reports_them(tmp_path, shared_live: bool) -> None:
    # TF writes a checkpoint whose node 1 is reached by two edges.
    root = tf.Module()
    root.a = root.b = tf.Module()
    root.a.v = tf.Variable(1.0)
    path = tf.train.Checkpoint(root=root).write(str(tmp_path / "ckpt"))

    def live(module: type, variable: type) -> object:
        obj = module()
        obj.a = module()
        obj.b = obj.a if shared_live else module()
        obj.a.v = variable(0.0)
        return obj

    tf_live = live(tf.Module, tf.Variable)
    tf_matched: dict[int, object] = {}
    lines = tf_log_lines(lambda: tf_matched.update(tf.train.CheckpointView(path).match(tf_live)))
    tp_live = live(tp.Module, tp.Variable)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp_matched = tp.CheckpointView(path).match(tp_live)

    assert sorted(tp_matched) == sorted(tf_matched)
    assert tp_matched[1] is tp_live.a and tf_matched[1] is tf_live.a
    tf_warned = [line for line in lines if PHRASE in line]
    tp_warned = [str(w.message) for w in caught if PHRASE in str(w.message) and issubclass(w.category, UserWarning)]
    assert len(tp_warned) == len(tf_warned) == (0 if shared_live else 1)
