"""Real TensorFlow 2.21 and ``tp.convert``: TF restores converted safetensors with ``assert_consumed()``,
and TF-written checkpoints (a Keras model, sliced variables) convert to safetensors the library reads.

Also the recipe the README documents for loading a Keras-written checkpoint into a torch module through
``safetensors.torch.load_model``, on a real Keras checkpoint from ``../shared/data/real``.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import trackpoint as tp
from tests.interop.tf_process import tf_side

safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.interop

tf_convert = tf_side("convert")

REAL = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real"


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "model.encoder.dense.kernel": rng.standard_normal((4, 3)).astype(np.float32),
        "model.encoder.dense.bias": rng.standard_normal(3).astype(np.float32),
        "model.head.w": rng.standard_normal((3, 2)),
        "model.steps": np.array(7, np.int64),
        "optimizer_free.scale": np.array([1.5], np.float16),
    }


def test_tf_restores_a_converted_safetensors_file_with_assert_consumed(tmp_path) -> None:
    src = str(tmp_path / "w.safetensors")
    safetensors_numpy.save_file(_weights(), src)
    prefix = str(tmp_path / "ckpt")
    tp.convert(src, prefix)
    # TF modules shaped like _weights(), all zero, restore it with assert_consumed().
    theirs = tf_convert.restore_converted(prefix, _weights(), str(tmp_path / "next"))
    assert np.array_equal(theirs["kernel"], _weights()["model.encoder.dense.kernel"])
    assert theirs["steps"] == 7 and theirs["scale"][0] == np.float16(1.5)
    assert theirs["save_counter"] == 0
    assert theirs["next"].endswith("next-1")  # and training carries on from it
    # tf.train.load_variable reads every key trackpoint wrote
    assert np.array_equal(theirs["head/w"], _weights()["model.head.w"])


def test_tf_reads_a_conversion_without_save_counter_with_assert_consumed(tmp_path) -> None:
    src = str(tmp_path / "w.safetensors")
    safetensors_numpy.save_file(_weights(), src)
    prefix = str(tmp_path / "ckpt")
    tp.convert(src, prefix, save_counter=False)
    head_w = tf_convert.read_converted(prefix, _weights())
    assert np.array_equal(head_w, _weights()["model.head.w"])


def test_a_tf_checkpoint_with_sliced_variables_converts_to_safetensors_and_back(tmp_path) -> None:
    path, big = tf_convert.save_sliced(str(tmp_path / "tf"))
    result = tp.convert(path, str(tmp_path / "hf"))
    loaded = safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(loaded) == ["model.big", "model.small"] == sorted(r.name for r in result.mapping)
    assert np.array_equal(loaded["model.big"], big)
    # and back, into a fresh TF module
    tp.convert(str(tmp_path / "hf"), str(tmp_path / "back"))
    assert np.array_equal(tf_convert.restore_sliced(str(tmp_path / "back")), big)


@pytest.mark.skipif(not (REAL / "tf2-kk412-cp").is_dir(), reason=f"the real-world checkpoints are not at {REAL}")
def test_a_real_keras_dense_stack_loads_into_torch_after_the_documented_recipe(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_model

    prefix = str(REAL / "tf2-kk412-cp" / "cp-0000.ckpt")
    out = str(tmp_path / "hf")
    from trackpoint.cli import main

    status = main(
        [
            "convert",
            prefix,
            out,
            "--rename",
            r"^layer_with_weights-(\d+)\.=fc\1.",
            "--rename",
            r"\.kernel$=.weight",
            "--transpose",
            r"kernel$",
        ]
    )
    assert status == 0

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc0 = torch.nn.Linear(784, 512)
            self.fc1 = torch.nn.Linear(512, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc1(torch.relu(self.fc0(x)))

    net = Net()
    missing, unexpected = load_model(net, out + "/model.safetensors")
    assert (list(missing), list(unexpected)) == ([], [])
    kernel0 = tp.load_variable(prefix, "layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE")
    bias0 = tp.load_variable(prefix, "layer_with_weights-0/bias/.ATTRIBUTES/VARIABLE_VALUE")
    kernel1 = tp.load_variable(prefix, "layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE")
    bias1 = tp.load_variable(prefix, "layer_with_weights-1/bias/.ATTRIBUTES/VARIABLE_VALUE")
    x = np.random.default_rng(0).standard_normal((5, 784)).astype(np.float32)
    expected = np.maximum(x @ kernel0 + bias0, 0) @ kernel1 + bias1  # the Keras model's Dense-ReLU-Dense
    with torch.no_grad():
        got = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_tf_keras_checkpoint_through_safetensors_with_include_graph_restores_in_tf(tmp_path) -> None:
    """TF writes a Keras model with its optimizer's slots; converted with include_graph and back, TF
    restores it into a fresh model and optimizer with assert_consumed(), every value equal."""
    prefix, before = tf_convert.keras_write(str(tmp_path / "tf" / "ckpt"))
    tp.convert(prefix, str(tmp_path / "hf"), include_graph=True)
    back = str(tmp_path / "back" / "ckpt")
    tp.convert(str(tmp_path / "hf"), back)
    after = tf_convert.keras_read(back)  # a fresh model and optimizer, read with assert_consumed()
    assert len(after) == len(before)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
