"""The partial-restore warning names what TensorFlow 2.21's names, for one TF-written checkpoint."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest
import tensorflow as tf

import trackpoint as tp
from tests.helpers import parse_warning, tf_log_lines


@pytest.fixture(scope="module")
def tf_checkpoint(tmp_path_factory) -> str:
    """v1, v2 and a TF1 Adam with slots for v1 (trackpoint's optimizer layout), written by TF."""
    v1, v2 = tf.Variable(2.0), tf.Variable(3.0)
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    optimizer.apply_gradients([(tf.constant(0.0), v1)])
    return tf.train.Checkpoint(v1=v1, v2=v2, optimizer=optimizer).save(str(tmp_path_factory.mktemp("tf") / "ckpt"))


def _tf_report(run: Callable[[], None]) -> tuple[list[str], dict[str, str]]:
    """What TF logs when ``run`` drops its partial restore: values never restored, attributes not taken."""
    lines = tf_log_lines(run)
    assert any("deleted with unrestored values" in line and "expect_partial()" in line for line in lines)
    unmatched = [
        line.split(": ", 1)[1]
        for line in lines
        if line.startswith("Value in checkpoint could not be found in the restored object: ")
    ]
    unused = {}
    for line in lines:
        found = re.fullmatch(
            r"An attribute in the restored object could not be found in the checkpoint\. "
            r"Object: (.*), attribute: \['(.*)'\]",
            line,
        )
        if found:
            unused[found.group(1)] = found.group(2)
    return unmatched, unused


def _tp_report(run: Callable[[], None]) -> tuple[list[str], dict[str, str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    messages = [str(w.message) for w in caught if "deleted with unrestored values" in str(w.message)]
    assert len(messages) == 1 and "expect_partial()" in messages[0]
    return parse_warning(messages[0])


def test_a_variable_restored_into_an_object_without_values_is_reported_as_tf_does(tf_checkpoint, no_gc) -> None:
    def run_tf() -> None:
        root = tf.train.Checkpoint(v1=tf.Module(), v2=tf.Variable(0.0))
        root.restore(tf_checkpoint)
        del root

    def run_tp() -> None:
        root = tp.Checkpoint(v1=tp.Trackable(), v2=tp.Variable(0.0))
        root.restore(tf_checkpoint)
        del root

    theirs, ours = _tf_report(run_tf), _tp_report(run_tp)
    assert ours == theirs
    assert ours[1] == {"(root).v1": "VARIABLE_VALUE"}


def test_a_dropped_partial_root_is_reported_as_tf_does(tf_checkpoint, no_gc) -> None:
    def run_tf() -> None:
        root = tf.train.Checkpoint(v1=tf.Variable(0.0))
        root.restore(tf_checkpoint)
        del root

    def run_tp() -> None:
        root = tp.Checkpoint(v1=tp.Variable(0.0))
        root.restore(tf_checkpoint)
        del root

    theirs, ours = _tf_report(run_tf), _tp_report(run_tp)
    assert ours == theirs
    assert "(root).v2" in ours[0] and "(root).optimizer's state 'm' for (root).v1" in ours[0]
