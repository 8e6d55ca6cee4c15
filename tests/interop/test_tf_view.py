"""CheckpointView agrees with tf.train.CheckpointView; split dependencies move to and from TF variables."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import trackpoint as tp
from tests.helpers import HasVariables, SaveTensorSlicesAsDeps


def _simple(lib, module):
    class SimpleModule(module):
        def __init__(self, name=None) -> None:
            super().__init__(name=name)
            self.a_var = lib.Variable(5.0)
            self.b_var = lib.Variable(4.0)
            self.vars = [lib.Variable(1.0), lib.Variable(2.0)]

    return SimpleModule


def _save(lib, module, path: str) -> str:
    simple = _simple(lib, module)
    root = simple(name="root")
    leaf = root.leaf = simple(name="leaf")
    leaf.leaf3 = lib.Variable(6.0, name="leaf3")
    leaf.leaf4 = lib.Variable(7.0, name="leaf4")
    checkpoint = tf.train.Checkpoint if lib is tf else tp.Checkpoint
    return checkpoint(root).save(path)


def _live(lib, module):
    simple = _simple(lib, module)
    root2 = simple(name="root")
    leaf2 = root2.leaf2 = simple(name="leaf2")
    leaf2.leaf3 = lib.Variable(6.0)
    leaf2.leaf4 = lib.Variable(7.0)
    return root2


@pytest.mark.parametrize("writer", ["tf", "tp"])
def test_view_results_equal_tf(tmp_path, writer: str) -> None:
    path = _save(tf, tf.Module, str(tmp_path / "c")) if writer == "tf" else _save(tp, tp.Module, str(tmp_path / "c"))
    theirs, ours = tf.train.CheckpointView(path), tp.CheckpointView(path)
    for node_id in theirs.descendants():
        assert ours.children(node_id) == theirs.children(node_id)
    assert ours.descendants() == theirs.descendants()
    tf_match, tf_only_ckpt, tf_only_live = theirs.diff(_live(tf, tf.Module))
    tp_match, tp_only_ckpt, tp_only_live = ours.diff(_live(tp, tp.Module))
    assert sorted(tp_match) == sorted(tf_match) == [0, 1, 2, 3, 6, 7]
    assert tp_only_ckpt == tf_only_ckpt == [4, 5, 8, 9, 10, 11, 12, 13, 14]
    assert len(tp_only_live) == len(tf_only_live) == 8


def test_non_object_bundle_is_rejected_like_tf(tmp_path) -> None:
    tp.save_tensors(str(tmp_path / "plain"), {"x": np.zeros(2)})
    with pytest.raises(ValueError, match="object-based"):
        tf.train.CheckpointView(str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="object-based"):
        tp.CheckpointView(str(tmp_path / "plain"))


def test_tf_restores_split_components_into_plain_variables(tmp_path) -> None:
    source = SaveTensorSlicesAsDeps()
    source.combined = tp.NoDependency(np.array([1, 2, 3, 4], np.float32))
    path = tp.Checkpoint(obj=source).write(str(tmp_path / "c"))
    target = tf.Module()
    target.first_half = tf.Variable([0.0, 0.0])
    target.second_half = tf.Variable([0.0, 0.0])
    tf.train.Checkpoint(obj=target).read(path).assert_consumed()
    assert target.first_half.numpy().tolist() == [1, 2] and target.second_half.numpy().tolist() == [3, 4]


def test_tf_variables_restore_into_split_object_on_creation(tmp_path) -> None:
    source = tf.Module()
    source.first_half = tf.Variable([5.0, 6.0])
    source.second_half = tf.Variable([7.0, 8.0])
    path = tf.train.Checkpoint(obj=source).write(str(tmp_path / "c"))
    target = SaveTensorSlicesAsDeps(track=False)
    status = tp.Checkpoint(obj=target).read(path)
    target.track_all()
    status.assert_consumed()
    assert target.combined.tolist() == [5, 6, 7, 8]
    # and the other way round, through a trackpoint checkpoint of plain variables
    plain = HasVariables()
    tp.Checkpoint(obj=plain).read(path).assert_consumed()
    assert plain.second_half.numpy().tolist() == [7, 8]
