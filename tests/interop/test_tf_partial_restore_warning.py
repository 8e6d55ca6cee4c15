"""The partial-restore warning names what TensorFlow 2.21's names, for one TF-written checkpoint."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest

import trackpoint as tp
from tests.helpers import parse_warning
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_partial = tf_side("partial")


@pytest.fixture(scope="module")
def tf_checkpoint(tmp_path_factory) -> str:
    """v1, v2 and a TF1 Adam with slots for v1 (trackpoint's optimizer layout), written by TF."""
    return tf_partial.write_checkpoint(str(tmp_path_factory.mktemp("tf") / "ckpt"))


def _tf_report(path: str, run: str) -> tuple[list[str], dict[str, str]]:
    """What TF logs when its run ``run`` (tf_side/partial.py) drops its partial restore of ``path``:
    values never restored, attributes not taken."""
    lines = tf_partial.dropped_restore_log(path, run)
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
    def run_tp() -> None:
        root = tp.Checkpoint(v1=tp.Trackable(), v2=tp.Variable(0.0))
        root.restore(tf_checkpoint)
        del root

    theirs, ours = _tf_report(tf_checkpoint, "without_values"), _tp_report(run_tp)
    assert ours == theirs
    assert ours[1] == {"(root).v1": "VARIABLE_VALUE"}


def test_a_dropped_partial_root_is_reported_as_tf_does(tf_checkpoint, no_gc) -> None:
    def run_tp() -> None:
        root = tp.Checkpoint(v1=tp.Variable(0.0))
        root.restore(tf_checkpoint)
        del root

    theirs, ours = _tf_report(tf_checkpoint, "partial_root"), _tp_report(run_tp)
    assert ours == theirs
    assert "(root).v2" in ours[0] and "(root).optimizer's state 'm' for (root).v1" in ours[0]
