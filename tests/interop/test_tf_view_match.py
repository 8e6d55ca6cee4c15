"""CheckpointView.match warns where tf.train.CheckpointView.match logs, and matches the same nodes."""

from __future__ import annotations

import warnings

import pytest

import trackpoint as tp
from tests.interop import structures
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_view = tf_side("view")

PHRASE = "Inconsistent references when matching the checkpoint into this object graph."


@pytest.mark.parametrize("shared_live", [False, True], ids=["two live objects", "one live object"])
def test_inconsistent_references_are_reported_as_tf_reports_them(tmp_path, shared_live: bool) -> None:
    # TF writes a checkpoint whose node 1 is reached by two edges.
    path = tf_view.write_two_paths(str(tmp_path / "ckpt"))

    # TF matches its own live objects (tf_side/view.py): ids, whether node 1 is its live ``a``, lines logged.
    tf_matched, tf_matched_a, tf_warned = tf_view.match_two_paths(path, shared_live, PHRASE)
    tp_live = structures.two_paths_live(tp.Variable, tp.Module, shared_live)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp_matched = tp.CheckpointView(path).match(tp_live)

    assert sorted(tp_matched) == tf_matched
    assert tp_matched[1] is tp_live.a and tf_matched_a
    tp_warned = [str(w.message) for w in caught if PHRASE in str(w.message) and issubclass(w.category, UserWarning)]
    assert len(tp_warned) == tf_warned == (0 if shared_live else 1)
