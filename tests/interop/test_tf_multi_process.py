"""A checkpoint four processes saved (one slice of a tensor each, replicated values once) is one
TensorFlow checkpoint: TF 2.21 reads every tensor whole, slices assembled, and restores it. So is
what torch.distributed.checkpoint saves through TFStorageWriter."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import trackpoint as tp
from tests.distributed.ranks import FULL, REPLICATED, full_value, run_ranks
from tests.distributed.test_multi_process import W_KEY, _save_with_manager


def test_tf_reads_a_checkpoint_of_four_ranks_as_whole_tensors(tmp_path) -> None:
    results = run_ranks(_save_with_manager, 4, str(tmp_path), str(tmp_path), 2)
    assert all("value" in r for r in results), results
    path = results[0]["value"][2]
    reader = tf.train.load_checkpoint(path)
    assert reader.get_variable_to_shape_map()[W_KEY] == list(FULL)
    np.testing.assert_array_equal(reader.get_tensor(W_KEY), full_value(2))
    for i in range(REPLICATED):
        np.testing.assert_array_equal(
            reader.get_tensor(f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE"), np.full((i + 1) * 7, 2.0 + i)
        )
    # TF's object-based restore walks the graph the four ranks agreed on.
    module = tf.Module()
    module.w = tf.Variable(np.zeros(FULL, np.float32))
    module.rest = [tf.Variable(np.zeros((i + 1) * 7)) for i in range(REPLICATED)]
    tf.train.Checkpoint(model=module).restore(path).assert_existing_objects_matched()
    np.testing.assert_array_equal(module.w.numpy(), full_value(2))
    assert tp.latest_checkpoint(str(tmp_path / "run")) == path


def test_tf_reads_what_dcp_saved_through_trackpoints_storage(tmp_path) -> None:
    """Two ranks' DTensor shards, saved by torch.distributed.checkpoint with TFStorageWriter."""
    from tests.distributed.test_dcp_bridge import FULL as DCP_FULL
    from tests.distributed.test_dcp_bridge import _full, _save

    results = run_ranks(_save, 2, str(tmp_path), str(tmp_path))
    assert all("value" in r for r in results), results
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt"))
    shapes = reader.get_variable_to_shape_map()
    assert shapes["model.w"] == list(DCP_FULL) and shapes["model.b"] == [5]
    np.testing.assert_array_equal(reader.get_tensor("model.w"), _full())
    np.testing.assert_array_equal(reader.get_tensor("model.b"), np.full(5, 7.0))
