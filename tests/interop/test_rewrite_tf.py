"""TensorFlow 2.21 restores what ``tp.rewrite`` made of its own checkpoints, with ``assert_consumed()``."""

from __future__ import annotations

import os

import numpy as np
import pytest

import trackpoint as tp
from trackpoint import cli

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.interop


def _source(directory: str) -> tuple[str, dict[str, np.ndarray]]:
    """A TF checkpoint of a module and a TF1 Adam with slots after two steps; its values by key."""
    model = tf.Module()
    model.encoder = tf.Module()
    model.encoder.w = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    model.head = tf.Variable(np.array([0.5, -1.5, 2.25], np.float32), name="head")
    model.bias = tf.Variable(np.float32(0.25), name="bias")
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    for _ in range(2):
        optimizer.minimize(
            lambda: tf.reduce_sum(model.encoder.w**2) + tf.reduce_sum(model.head * 3.0) + model.bias**2,
            var_list=[model.encoder.w, model.head, model.bias],
        )
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(os.path.join(directory, "src"))
    reader = tf.train.load_checkpoint(path)
    return path, {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def test_tf_restores_a_moved_dropped_added_and_cast_checkpoint(tmp_path) -> None:
    src, before = _source(str(tmp_path))
    out = tp.rewrite(
        src,
        str(tmp_path / "out" / "ckpt"),
        rename={"model/encoder": "model/backbone/encoder"},
        drop=["model/bias/.OPTIMIZER_SLOT/m", "model/bias/.OPTIMIZER_SLOT/optimizer/v"],
        add={"model/scale": np.full(4, 2.0, np.float32)},
        cast={"model/head": "float64"},
    )
    # The TF structure the rules describe: encoder under backbone, head in float64 (its slots
    # too, as TF makes them), bias without optimizer slots, a new variable scale.
    model = tf.Module()
    model.backbone = tf.Module()
    model.backbone.encoder = tf.Module()
    model.backbone.encoder.w = tf.Variable(tf.zeros((2, 3)), name="w")
    model.head = tf.Variable(tf.zeros(3, tf.float64), name="head")
    model.bias = tf.Variable(0.0, name="bias")
    model.scale = tf.Variable(tf.zeros(4), name="scale")
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    optimizer.apply_gradients(
        [(tf.zeros((2, 3)), model.backbone.encoder.w), (tf.zeros(3, tf.float64), model.head)]
    )  # creates the slots of w and head only
    tf.train.Checkpoint(model=model, optimizer=optimizer).read(out).assert_consumed()

    w = model.backbone.encoder.w
    np.testing.assert_array_equal(w.numpy(), before["model/encoder/w/.ATTRIBUTES/VARIABLE_VALUE"])
    head = before["model/head/.ATTRIBUTES/VARIABLE_VALUE"]
    assert model.head.dtype == tf.float64
    np.testing.assert_array_equal(model.head.numpy(), head.astype(np.float64))
    np.testing.assert_array_equal(model.bias.numpy(), before["model/bias/.ATTRIBUTES/VARIABLE_VALUE"])
    np.testing.assert_array_equal(model.scale.numpy(), np.full(4, 2.0, np.float32))
    for slot in ("m", "v"):
        np.testing.assert_array_equal(
            optimizer.get_slot(w, slot).numpy(),
            before[f"model/encoder/w/.OPTIMIZER_SLOT/optimizer/{slot}/.ATTRIBUTES/VARIABLE_VALUE"],
        )
        np.testing.assert_array_equal(
            optimizer.get_slot(model.head, slot).numpy(),
            before[f"model/head/.OPTIMIZER_SLOT/optimizer/{slot}/.ATTRIBUTES/VARIABLE_VALUE"].astype(np.float64),
        )
    for power in ("beta1_power", "beta2_power"):
        assert float(optimizer._get_beta_accumulators()[power == "beta2_power"].numpy()) == float(
            before[f"optimizer/{power}/.ATTRIBUTES/VARIABLE_VALUE"]
        )
    assert tp.verify_checkpoint(out) == []
    assert cli.main(["verify", out]) == 0


def test_tf_restores_after_dropping_the_whole_optimizer_and_a_subtree(tmp_path) -> None:
    src, before = _source(str(tmp_path))
    out = tp.rewrite(src, str(tmp_path / "ckpt"), drop=["optimizer", "model/bias"], rename={"model": "net"})
    net = tf.Module()
    net.encoder = tf.Module()
    net.encoder.w = tf.Variable(tf.zeros((2, 3)))
    net.head = tf.Variable(tf.zeros(3))
    tf.train.Checkpoint(net=net).read(out).assert_consumed()
    np.testing.assert_array_equal(net.head.numpy(), before["model/head/.ATTRIBUTES/VARIABLE_VALUE"])
    assert not [k for k, _ in tp.list_variables(out) if "OPTIMIZER_SLOT" in k or k.startswith("optimizer")]


def test_tf_reads_a_name_based_checkpoint_renamed_by_key(tmp_path) -> None:
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable("layer/kernel", initializer=np.ones((2, 2), np.float32))
        tf.compat.v1.get_variable("layer/bias", initializer=np.zeros(2, np.float32))
        tf.compat.v1.get_variable("global_step", initializer=np.int64(7))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            src = saver.save(session, str(tmp_path / "model.ckpt"), write_meta_graph=False)
    out = tp.rewrite(src, str(tmp_path / "renamed"), rename={"layer": "encoder/layer"}, cast={"global_step": "int32"})
    reader = tf.train.load_checkpoint(out)
    assert sorted(reader.get_variable_to_shape_map()) == ["encoder/layer/bias", "encoder/layer/kernel", "global_step"]
    np.testing.assert_array_equal(reader.get_tensor("encoder/layer/kernel"), np.ones((2, 2), np.float32))
    assert reader.get_variable_to_dtype_map()["global_step"] == tf.int32
    assert reader.get_tensor("global_step") == 7


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
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=specs, tensors=values)
        prefixes.append(prefix)
    shutil.copytree(tmp_path / "tf_temp", tmp_path / "ours_temp")
    tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=prefixes, destination_prefix=str(tmp_path / "tf" / "ckpt"), delete_old_dirs=True
    )
    ours = tp.merge([str(tmp_path / "ours_temp" / name) for name in parts], str(tmp_path / "ours" / "ckpt"))
    theirs = sorted(os.listdir(tmp_path / "tf"))
    assert theirs == sorted(os.listdir(tmp_path / "ours"))
    for filename in theirs:
        assert (tmp_path / "tf" / filename).read_bytes() == (tmp_path / "ours" / filename).read_bytes(), filename
    np.testing.assert_array_equal(tf.train.load_checkpoint(ours).get_tensor("big"), big)


def test_tf_restores_a_renamed_keras_model_and_optimizer(tmp_path) -> None:
    """Keras 3 under TF: the weights are reached first through the optimizer, and stay named so."""
    keras = pytest.importorskip("keras")

    def build():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        return model, keras.optimizers.Adam(0.01)

    model, optimizer = build()
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=2, verbose=0)
    src = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "src"))
    out = tp.rewrite(src, str(tmp_path / "out"), rename={"model": "net", "optimizer": "training/adam"})
    assert tp.verify_checkpoint(out) == []
    fresh, fresh_optimizer = build()
    fresh_optimizer.build(fresh.trainable_variables)
    checkpoint = tf.train.Checkpoint(net=fresh, training=tf.Module())
    checkpoint.training.adam = fresh_optimizer
    checkpoint.read(out).assert_consumed()
    for ours, theirs in zip(fresh.weights, model.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    for ours, theirs in zip(fresh_optimizer.variables, optimizer.variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_tf_saving_the_changed_structure_writes_what_rewrite_wrote(tmp_path) -> None:
    """The layout is TF's own: the structure restored from a rewrite, saved again by TF, gives the
    same object graph (TF's process-wide slot names such as 'w/Adam_2' aside) and the same
    tensors at the same offsets with the same checksums."""
    from trackpoint._format.bundle_reader import BundleReader
    from trackpoint._graph.object_graph import read_object_graph

    src, _ = _source(str(tmp_path))
    out = tp.rewrite(
        src,
        str(tmp_path / "out" / "ckpt"),
        rename={"model/encoder": "model/backbone/encoder"},
        drop=["model/bias/.OPTIMIZER_SLOT/m", "model/bias/.OPTIMIZER_SLOT/optimizer/v"],
        add={"model/scale": np.full(4, 2.0, np.float32)},
        cast={"model/head": "float64"},
    )
    # The moved encoder comes after head and bias, as rewrite appends what it moves, then scale.
    model = tf.Module()
    model.head = tf.Variable(tf.zeros(3, tf.float64), name="head")
    model.bias = tf.Variable(0.0, name="bias")
    model.backbone = tf.Module()
    model.backbone.encoder = tf.Module()
    model.backbone.encoder.w = tf.Variable(tf.zeros((2, 3)), name="w")
    model.scale = tf.Variable(tf.zeros(4), name="scale")
    optimizer = tf.compat.v1.train.AdamOptimizer(0.1)
    optimizer.apply_gradients([(tf.zeros(3, tf.float64), model.head), (tf.zeros((2, 3)), model.backbone.encoder.w)])
    tf.train.Checkpoint(model=model, optimizer=optimizer).read(out).assert_consumed()
    again = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "tf" / "ckpt"))

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
