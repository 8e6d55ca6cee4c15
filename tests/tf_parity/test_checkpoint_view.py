"""Port of TensorFlow's ``tensorflow/python/checkpoint/checkpoint_view_test.py`` to trackpoint.

Source: the newest copy the code index holds (a mirror of ``tensorflow/tensorflow`` with
``test_all_nodes_with_paths`` and ``test_diff``; the index's own ``tensorflow/tensorflow`` copy has
neither): 6 test methods, all ported. ``trackable_utils.Checkpoint`` is ``tp.Checkpoint``,
``checkpoint_view.CheckpointView`` is ``tp.CheckpointView``, ``autotrackable.AutoTrackable`` is
``tp.AutoTrackable``; TF's ``assertLogs(level="WARNING")`` becomes recording ``warnings.warn``
(trackpoint warns with ``UserWarning``).

Left out: none.
"""

from __future__ import annotations

import warnings

import trackpoint as tp


def _save_tree(tmp_path) -> str:
    """Save the tree the TF tests share: root → leaf1 (leaf3, leaf4), leaf2 (leaf5); its path."""
    root = tp.AutoTrackable()
    leaf1 = root.leaf1 = tp.AutoTrackable()
    leaf2 = root.leaf2 = tp.AutoTrackable()
    leaf1.leaf3 = tp.AutoTrackable()
    leaf1.leaf4 = tp.AutoTrackable()
    leaf2.leaf5 = tp.AutoTrackable()
    return tp.Checkpoint(root=root).save(str(tmp_path / "root_ckpt"))


def test_children(tmp_path) -> None:
    """Ports CheckpointViewTest.test_children."""
    root = tp.AutoTrackable()
    root.leaf = tp.AutoTrackable()
    root_ckpt = tp.Checkpoint(root=root)
    root_save_path = root_ckpt.save(str(tmp_path / "root_ckpt"))
    current_name, node_id = next(iter(tp.CheckpointView(root_save_path).children(0).items()))
    assert "leaf" == current_name
    assert 1 == node_id


def test_all_nodes(tmp_path) -> None:
    """Ports CheckpointViewTest.test_all_nodes."""
    root = tp.AutoTrackable()
    root.leaf = tp.AutoTrackable()
    root_ckpt = tp.Checkpoint(root=root)
    root_save_path = root_ckpt.save(str(tmp_path / "root_ckpt"))
    all_nodes = tp.CheckpointView(root_save_path).descendants()
    assert 3 == len(all_nodes)
    assert 0 == all_nodes[0]
    assert 1 == all_nodes[1]


def test_all_nodes_with_paths(tmp_path) -> None:
    """Ports CheckpointViewTest.test_all_nodes_with_paths."""
    root_save_path = _save_tree(tmp_path)
    # TF tests this private method ("names ... subject to change"); trackpoint keeps it with
    # TF's spelling, beside its public CheckpointView.paths() ("(root).leaf1").
    all_nodes_with_paths = tp.CheckpointView(root_save_path)._descendants_with_paths()
    assert {
        "root",
        "root.leaf1",
        "root.leaf2",
        "root.save_counter",
        "root.leaf1.leaf3",
        "root.leaf1.leaf4",
        "root.leaf2.leaf5",
    } == set(all_nodes_with_paths.values())


def test_match(tmp_path) -> None:
    """Ports CheckpointViewTest.test_match."""
    root_save_path = _save_tree(tmp_path)

    root2 = tp.AutoTrackable()
    leaf11 = root2.leaf1 = tp.AutoTrackable()
    leaf12 = root2.leaf2 = tp.AutoTrackable()
    leaf13 = leaf11.leaf3 = tp.AutoTrackable()
    leaf15 = leaf12.leaf5 = tp.AutoTrackable()
    matching_nodes = tp.CheckpointView(root_save_path).match(root2)
    assert matching_nodes == {0: root2, 1: leaf11, 2: leaf12, 4: leaf13, 6: leaf15}


def test_match_overlapping_nodes(tmp_path) -> None:
    """Ports CheckpointViewTest.test_match_overlapping_nodes."""
    root1 = tp.AutoTrackable()
    root1.a = root1.b = tp.AutoTrackable()
    root_ckpt = tp.Checkpoint(root=root1)
    root_save_path = root_ckpt.save(str(tmp_path / "root_ckpt"))

    root2 = tp.AutoTrackable()
    a1 = root2.a = tp.AutoTrackable()
    root2.b = tp.AutoTrackable()
    with warnings.catch_warnings(record=True) as logs:
        warnings.simplefilter("always")
        matching_nodes = tp.CheckpointView(root_save_path).match(root2)
    assert matching_nodes == {
        0: root2,
        1: a1,
        # Only the first element at the same position will be matched.
    }
    expected_message = "Inconsistent references when matching the checkpoint into this object graph."
    assert logs, "expected a warning"  # TF: assertLogs fails when nothing is logged
    assert issubclass(logs[0].category, UserWarning)
    assert expected_message in str(logs[0].message)


def test_diff(tmp_path) -> None:
    """Ports CheckpointViewTest.test_diff."""
    root_save_path = _save_tree(tmp_path)

    root2 = tp.AutoTrackable()
    leaf11 = root2.leaf1 = tp.AutoTrackable()
    leaf12 = root2.leaf2 = tp.AutoTrackable()
    leaf13 = leaf11.leaf3 = tp.AutoTrackable()
    leaf15 = leaf12.leaf5 = tp.AutoTrackable()
    leaf16 = leaf12.leaf6 = tp.AutoTrackable()
    diff = tp.CheckpointView(root_save_path).diff(root2)
    assert len(diff) == 3
    assert diff[0] == {0: root2, 1: leaf11, 2: leaf12, 4: leaf13, 6: leaf15}
    assert diff[1] == [3, 5]
    assert diff[2] == [leaf16]
