"""Checkpoints of torch objects are TensorFlow checkpoints: TF 2.21 reads every value, walks the graph,
and a torch-trained model loaded into tf.Variables by key computes the same outputs."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import torch

import trackpoint as tp
import trackpoint.torch as tpt


def _trained(steps: int = 5) -> tuple[torch.nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(32, 6)).pow(2).mean().backward()
        optimizer.step()
    return model, optimizer


def test_tf_reads_every_value_by_key_and_walks_the_graph(tmp_path) -> None:
    model, optimizer = _trained()
    path = tpt.Checkpoint(model=model, optimizer=optimizer, step=tp.Variable(5, dtype="int64")).save(
        str(tmp_path / "ckpt")
    )
    reader = tf.train.load_checkpoint(path)
    ours = tp.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    assert set(shapes) == set(ours.get_variable_to_shape_map())
    for key in shapes:
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        expected = ours.get_tensor(key)
        got = reader.get_tensor(key)
        if isinstance(expected, bytes):
            assert got == expected
        else:
            np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(
        reader.get_tensor("model/0/weight/.OPTIMIZER_SLOT/optimizer/exp_avg_sq/.ATTRIBUTES/VARIABLE_VALUE"),
        optimizer.state[model[0].weight]["exp_avg_sq"].numpy(),
    )
    view = tf.train.CheckpointView(path)
    root = view.children(0)
    assert {"model", "optimizer", "step", "save_counter"} <= set(root)
    layers = view.children(root["model"])
    assert set(layers) == {"0", "1", "2"}
    assert set(view.children(layers["2"])) == {"weight", "bias"}


def test_weights_loaded_into_tf_variables_by_key_give_the_same_outputs(tmp_path) -> None:
    model, _ = _trained()
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    reader = tf.train.load_checkpoint(path)

    def variable(layer: int, name: str) -> tf.Variable:
        return tf.Variable(reader.get_tensor(f"model/{layer}/{name}/.ATTRIBUTES/VARIABLE_VALUE"))

    w0, b0, w2, b2 = variable(0, "weight"), variable(0, "bias"), variable(2, "weight"), variable(2, "bias")
    x = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
    hidden = tf.tanh(tf.matmul(x, w0, transpose_b=True) + b0)  # torch's Linear: x W^T + b
    tf_out = (tf.matmul(hidden, w2, transpose_b=True) + b2).numpy()
    with torch.no_grad():
        torch_out = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(tf_out, torch_out, rtol=1e-5, atol=1e-6)  # float32, two matmul orders
