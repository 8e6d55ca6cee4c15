"""TensorFlow 2.21 restores what ``tp.rewrite`` made of its own checkpoints, with ``assert_consumed()``."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import trackpoint as tp
from tests.interop.tf_process import tf_side
from trackpoint import cli

pytestmark = pytest.mark.interop

tf_files, tf_rewrite = tf_side("files"), tf_side("rewrite")

# What test_tf_restores_a_moved_dropped_added_and_cast_checkpoint and the layout test do to the source.
MOVE = {
    "rename": {"model/encoder": "model/backbone/encoder"},
    "drop": ["model/bias/.OPTIMIZER_SLOT/m", "model/bias/.OPTIMIZER_SLOT/optimizer/v"],
    "add": {"model/scale": np.full(4, 2.0, np.float32)},
    "cast": {"model/head": "float64"},
}


def test_tf_restores_a_moved_dropped_added_and_cast_checkpoint(tmp_path) -> None:
    # A TF checkpoint of a module and a TF1 Adam with slots after two steps; its values by key.
    src, before = tf_rewrite.write_source(str(tmp_path))
    out = tp.rewrite(src, str(tmp_path / "out" / "ckpt"), **MOVE)
    # The TF structure the rules describe (encoder under backbone, head in float64 with its slots, bias
    # without optimizer slots, a new variable scale) reads it with assert_consumed() in tf_side/rewrite.py.
    theirs = tf_rewrite.restore_moved(out)

    np.testing.assert_array_equal(theirs["w"], before["model/encoder/w/.ATTRIBUTES/VARIABLE_VALUE"])
    head = before["model/head/.ATTRIBUTES/VARIABLE_VALUE"]
    assert theirs["head_dtype"] == "float64"
    np.testing.assert_array_equal(theirs["head"], head.astype(np.float64))
    np.testing.assert_array_equal(theirs["bias"], before["model/bias/.ATTRIBUTES/VARIABLE_VALUE"])
    np.testing.assert_array_equal(theirs["scale"], np.full(4, 2.0, np.float32))
    for slot in ("m", "v"):
        np.testing.assert_array_equal(
            theirs["slots"]["w", slot],
            before[f"model/encoder/w/.OPTIMIZER_SLOT/optimizer/{slot}/.ATTRIBUTES/VARIABLE_VALUE"],
        )
        np.testing.assert_array_equal(
            theirs["slots"]["head", slot],
            before[f"model/head/.OPTIMIZER_SLOT/optimizer/{slot}/.ATTRIBUTES/VARIABLE_VALUE"].astype(np.float64),
        )
    for power in ("beta1_power", "beta2_power"):
        assert theirs["powers"][power == "beta2_power"] == float(
            before[f"optimizer/{power}/.ATTRIBUTES/VARIABLE_VALUE"]
        )
    assert tp.verify_checkpoint(out) == []
    assert cli.main(["verify", out]) == 0


def test_tf_restores_after_dropping_the_whole_optimizer_and_a_subtree(tmp_path) -> None:
    src, before = tf_rewrite.write_source(str(tmp_path))
    out = tp.rewrite(src, str(tmp_path / "ckpt"), drop=["optimizer", "model/bias"], rename={"model": "net"})
    head = tf_rewrite.restore_net(out)  # net.encoder.w and net.head, read with assert_consumed()
    np.testing.assert_array_equal(head, before["model/head/.ATTRIBUTES/VARIABLE_VALUE"])
    assert not [k for k, _ in tp.list_variables(out) if "OPTIMIZER_SLOT" in k or k.startswith("optimizer")]


def test_tf_reads_a_name_based_checkpoint_renamed_by_key(tmp_path) -> None:
    src = tf_rewrite.write_name_based(str(tmp_path / "model.ckpt"))
    out = tp.rewrite(src, str(tmp_path / "renamed"), rename={"layer": "encoder/layer"}, cast={"global_step": "int32"})
    reader = tf_files.load(out)
    assert sorted(reader["shapes"]) == ["encoder/layer/bias", "encoder/layer/kernel", "global_step"]
    np.testing.assert_array_equal(reader["tensors"]["encoder/layer/kernel"], np.ones((2, 2), np.float32))
    assert reader["dtypes"]["global_step"] == "int32"
    assert reader["tensors"]["global_step"] == 7


def test_merge_writes_the_files_tf_merge_v2_checkpoints_writes(tmp_path) -> None:
    """Parts written by TF's SaveV2 (one sliced tensor across both), merged by TF and by trackpoint."""
    import shutil

    big = np.arange(40, dtype=np.float32).reshape(10, 4)
    parts = {
        "part-00000-of-00002": (["w", "big"], ["", "10 4 0,4:-"], [np.ones(3, np.float32), big[:4]]),
        "part-00001-of-00002": (["big", "step"], ["10 4 4,6:-", ""], [big[4:], np.int64(7)]),
    }
    prefixes = []
    for name, (names, specs, values) in parts.items():
        prefix = str(tmp_path / "tf_temp" / name)
        tf_rewrite.save_slices(prefix, names, specs, values)
        prefixes.append(prefix)
    shutil.copytree(tmp_path / "tf_temp", tmp_path / "ours_temp")
    tf_rewrite.merge(prefixes, str(tmp_path / "tf" / "ckpt"))
    ours = tp.merge([str(tmp_path / "ours_temp" / name) for name in parts], str(tmp_path / "ours" / "ckpt"))
    theirs = sorted(os.listdir(tmp_path / "tf"))
    assert theirs == sorted(os.listdir(tmp_path / "ours"))
    for filename in theirs:
        assert (tmp_path / "tf" / filename).read_bytes() == (tmp_path / "ours" / filename).read_bytes(), filename
    np.testing.assert_array_equal(tf_files.load(ours, ["big"])["tensors"]["big"], big)


def test_tf_restores_a_renamed_keras_model_and_optimizer(tmp_path) -> None:
    """Keras 3 under TF: the weights are reached first through the optimizer, and stay named so."""
    if importlib.util.find_spec("keras") is None:  # not imported here: it would import TensorFlow
        pytest.skip("keras is not installed")

    src, weights, variables = tf_rewrite.keras_fit_and_write(str(tmp_path / "src"))
    out = tp.rewrite(src, str(tmp_path / "out"), rename={"model": "net", "optimizer": "training/adam"})
    assert tp.verify_checkpoint(out) == []
    fresh_weights, fresh_variables = tf_rewrite.keras_read_renamed(out)  # net and training/adam, assert_consumed()
    for ours, theirs in zip(fresh_weights, weights):
        np.testing.assert_array_equal(ours, theirs)
    for ours, theirs in zip(fresh_variables, variables):
        np.testing.assert_array_equal(ours, theirs)


def test_tf_saving_the_changed_structure_writes_what_rewrite_wrote(tmp_path) -> None:
    """The layout is TF's own: the structure restored from a rewrite, saved again by TF, gives the
    same object graph (TF's process-wide slot names such as 'w/Adam_2' aside) and the same
    tensors at the same offsets with the same checksums."""
    from trackpoint._format.bundle_reader import BundleReader
    from trackpoint._graph.object_graph import read_object_graph

    src, _ = tf_rewrite.write_source(str(tmp_path))
    out = tp.rewrite(src, str(tmp_path / "out" / "ckpt"), **MOVE)
    # The moved encoder comes after head and bias, as rewrite appends what it moves, then scale: TF's
    # structure made in that order reads it with assert_consumed() and writes itself again.
    again = tf_rewrite.restore_moved_and_write_again(out, str(tmp_path / "tf" / "ckpt"))

    graphs = [read_object_graph(BundleReader(p)) for p in (out, again)]
    for graph in graphs:
        for node in graph.nodes:
            for attr in node.attributes:
                attr.ClearField("full_name")
    assert graphs[0] == graphs[1]

    def layout(prefix: str) -> dict[str, tuple[object, ...]]:
        entries = BundleReader(prefix).entries()
        return {e.key: (e.dtype_enum, e.shape, e.shard_id, e.offset, e.size, e.crc32c) for e in entries}

    ours, theirs = layout(out), layout(again)
    graph_key = "_CHECKPOINTABLE_OBJECT_GRAPH"
    assert ours[graph_key][:4] == theirs[graph_key][:4]  # last in the data file, at the same offset
    del ours[graph_key], theirs[graph_key]
    assert ours == theirs
