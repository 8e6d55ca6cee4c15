"""CheckpointView.match warns, as TF logs, when two live objects claim one checkpoint node."""

from __future__ import annotations

import warnings

import trackpoint as tp


def _shared_child_checkpoint(tmp_path) -> str:
    root = tp.AutoTrackable()
    root.a = root.b = tp.AutoTrackable()  # one node, two edges
    root.a.v = tp.Variable(1.0)
    return tp.Checkpoint(root=root).write(str(tmp_path / "ckpt"))


def test_two_live_objects_for_one_node_warn_and_the_first_is_kept(tmp_path) -> None:
    view = tp.CheckpointView(_shared_child_checkpoint(tmp_path))
    assert view.children(0)["a"] == view.children(0)["b"]
    live = tp.AutoTrackable()
    first = live.a = tp.AutoTrackable()
    second = live.b = tp.AutoTrackable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        matched = view.match(live)
    assert matched == {0: live, 1: first}
    (warning,) = caught
    assert issubclass(warning.category, UserWarning)
    message = str(warning.message)
    assert "Inconsistent references when matching the checkpoint into this object graph." in message
    assert repr(first) in message and repr(second) in message
    assert "(root).a" in message and "(root).b" in message and view.prefix in message


def test_one_live_object_on_both_paths_matches_quietly(tmp_path) -> None:
    view = tp.CheckpointView(_shared_child_checkpoint(tmp_path))
    live = tp.AutoTrackable()
    live.a = live.b = tp.AutoTrackable()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert view.match(live) == {0: live, 1: live.a}


def test_a_path_missing_on_the_live_side_is_no_conflict(tmp_path) -> None:
    view = tp.CheckpointView(_shared_child_checkpoint(tmp_path))
    live = tp.AutoTrackable()
    live.b = tp.AutoTrackable()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert view.match(live) == {0: live, 1: live.b}
