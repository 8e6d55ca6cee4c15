"""A checkpoint four processes saved (one slice of a tensor each, replicated values once) is one
TensorFlow checkpoint: TF 2.21 reads every tensor whole, slices assembled, and restores it. So is
what torch.distributed.checkpoint saves through TFStorageWriter."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from tests.distributed.ranks import FULL, REPLICATED, full_value, run_ranks
from tests.distributed.test_multi_process import W_KEY, _save_with_manager
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_files, tf_ranks = tf_side("files"), tf_side("multi_process")


def test_tf_reads_a_checkpoint_of_four_ranks_as_whole_tensors(tmp_path) -> None:
    results = run_ranks(_save_with_manager, 4, str(tmp_path), str(tmp_path), 2)
    assert all("value" in r for r in results), results
    path = results[0]["value"][2]
    reader = tf_files.load(path)
    assert reader["shapes"][W_KEY] == list(FULL)
    np.testing.assert_array_equal(reader["tensors"][W_KEY], full_value(2))
    for i in range(REPLICATED):
        np.testing.assert_array_equal(
            reader["tensors"][f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE"], np.full((i + 1) * 7, 2.0 + i)
        )
    # TF's object-based restore walks the graph the four ranks agreed on.
    restored_w = tf_ranks.restore_ranks(path, list(FULL), REPLICATED)
    np.testing.assert_array_equal(restored_w, full_value(2))
    assert tp.latest_checkpoint(str(tmp_path / "run")) == path


def test_tf_reads_what_dcp_saved_through_trackpoints_storage(tmp_path) -> None:
    """Two ranks' DTensor shards, saved by torch.distributed.checkpoint with TFStorageWriter."""
    from tests.distributed.test_dcp_bridge import FULL as DCP_FULL
    from tests.distributed.test_dcp_bridge import _full, _save

    results = run_ranks(_save, 2, str(tmp_path), str(tmp_path))
    assert all("value" in r for r in results), results
    reader = tf_files.load(str(tmp_path / "ckpt"))
    shapes = reader["shapes"]
    assert shapes["model.w"] == list(DCP_FULL) and shapes["model.b"] == [5]
    np.testing.assert_array_equal(reader["tensors"]["model.w"], _full())
    np.testing.assert_array_equal(reader["tensors"]["model.b"], np.full(5, 7.0))


def test_tf_reads_the_0d_tensors_dcp_saved_through_trackpoints_storage(tmp_path) -> None:
    """Issue 38.2: BatchNorm's count and Adam's steps, 0-d, are 0-d in TF too, as is every other tensor."""
    from tests.distributed.test_dcp_bridge import save_trained_on_two_ranks

    saved = save_trained_on_two_ranks(str(tmp_path))
    reader = tf_files.load(str(tmp_path / "bn"))
    shapes = reader["shapes"]
    for key, (dtype, shape, values) in saved.items():
        assert shapes[key] == shape, key
        value = reader["tensors"][key]
        assert str(value.dtype) == dtype.removeprefix("torch."), key
        np.testing.assert_array_equal(value, np.array(values, dtype=value.dtype), err_msg=key)
    assert reader["tensors"]["model.1.num_batches_tracked"] == 3
    assert reader["tensors"]["optim.state.0.weight.step"] == 3.0
