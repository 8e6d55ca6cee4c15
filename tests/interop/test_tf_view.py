"""CheckpointView agrees with tf.train.CheckpointView; split dependencies move to and from TF variables."""

from __future__ import annotations

import re

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import HasVariables, SaveTensorSlicesAsDeps
from tests.interop import structures
from tests.interop.tf_process import TFError, tf_side

pytestmark = pytest.mark.interop

tf_view = tf_side("view")


@pytest.mark.parametrize("writer", ["tf", "tp"])
def test_view_results_equal_tf(tmp_path, writer: str) -> None:
    if writer == "tf":
        path = tf_view.save_view_structure(str(tmp_path / "c"))
    else:
        path = structures.view_saved(tp.Variable, tp.Module, tp.Checkpoint, str(tmp_path / "c"))
    theirs, ours = tf_view.view(path), tp.CheckpointView(path)
    for node_id in theirs["descendants"]:
        assert ours.children(node_id) == theirs["children"][node_id]
    assert ours.descendants() == theirs["descendants"]
    tp_match, tp_only_ckpt, tp_only_live = ours.diff(structures.view_live(tp.Variable, tp.Module))
    assert sorted(tp_match) == theirs["match"] == [0, 1, 2, 3, 6, 7]
    assert tp_only_ckpt == theirs["only_checkpoint"] == [4, 5, 8, 9, 10, 11, 12, 13, 14]
    assert len(tp_only_live) == theirs["only_live"] == 8


def test_non_object_bundle_is_rejected_like_tf(tmp_path) -> None:
    tp.save_tensors(str(tmp_path / "plain"), {"x": np.zeros(2)})
    with pytest.raises(TFError) as raised:
        tf_view.view(str(tmp_path / "plain"))
    assert raised.value.is_a("ValueError") and re.search("object-based", raised.value.message)
    with pytest.raises(ValueError, match="object-based"):
        tp.CheckpointView(str(tmp_path / "plain"))


def test_tf_restores_split_components_into_plain_variables(tmp_path) -> None:
    source = SaveTensorSlicesAsDeps()
    source.combined = tp.NoDependency(np.array([1, 2, 3, 4], np.float32))
    path = tp.Checkpoint(obj=source).write(str(tmp_path / "c"))
    first_half, second_half = tf_view.read_halves(path)
    assert first_half == [1, 2] and second_half == [3, 4]


def test_tf_variables_restore_into_split_object_on_creation(tmp_path) -> None:
    path = tf_view.write_halves(str(tmp_path / "c"), [5.0, 6.0], [7.0, 8.0])
    target = SaveTensorSlicesAsDeps(track=False)
    status = tp.Checkpoint(obj=target).read(path)
    target.track_all()
    status.assert_consumed()
    assert target.combined.tolist() == [5, 6, 7, 8]
    # and the other way round, through a trackpoint checkpoint of plain variables
    plain = HasVariables()
    tp.Checkpoint(obj=plain).read(path).assert_consumed()
    assert plain.second_half.numpy().tolist() == [7, 8]
