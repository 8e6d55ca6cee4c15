"""Checkpoints of torch objects are TensorFlow checkpoints: TF 2.21 reads every value, walks the graph,
and a torch-trained model loaded into tf.Variables by key computes the same outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trackpoint as tp
import trackpoint.torch as tpt
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_files, tf_torch = tf_side("files"), tf_side("torch_model")


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
    reader = tf_files.load(path)
    ours = tp.load_checkpoint(path)
    shapes = reader["shapes"]
    assert set(shapes) == set(ours.get_variable_to_shape_map())
    for key in shapes:
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        expected = ours.get_tensor(key)
        got = reader["tensors"][key]
        if isinstance(expected, bytes):
            assert got == expected
        else:
            np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(
        reader["tensors"]["model/0/weight/.OPTIMIZER_SLOT/optimizer/exp_avg_sq/.ATTRIBUTES/VARIABLE_VALUE"],
        optimizer.state[model[0].weight]["exp_avg_sq"].numpy(),
    )
    view = tf_torch.walk(path)
    assert {"model", "optimizer", "step", "save_counter"} <= set(view["root"])
    assert set(view["model"]) == {"0", "1", "2"}
    assert set(view["model/2"]) == {"weight", "bias"}


def test_weights_loaded_into_tf_variables_by_key_give_the_same_outputs(tmp_path) -> None:
    model, _ = _trained()
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    x = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
    tf_out = tf_torch.two_layer_outputs(path, x)  # tf.Variables loaded by key, x W^T + b in TF
    with torch.no_grad():
        torch_out = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(tf_out, torch_out, rtol=1e-5, atol=1e-6)  # float32, two matmul orders
