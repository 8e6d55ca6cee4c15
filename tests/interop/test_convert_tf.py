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

tf = pytest.importorskip("tensorflow")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.interop

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


def _tf_modules() -> tuple[tf.Module, tf.Module]:
    """TF modules shaped like :func:`_weights` (``model`` and ``optimizer_free``), all values zero."""
    values = _weights()
    model = tf.Module()
    model.encoder = tf.Module()
    model.encoder.dense = tf.Module()
    model.encoder.dense.kernel = tf.Variable(np.zeros_like(values["model.encoder.dense.kernel"]))
    model.encoder.dense.bias = tf.Variable(np.zeros_like(values["model.encoder.dense.bias"]))
    model.head = tf.Module()
    model.head.w = tf.Variable(np.zeros_like(values["model.head.w"]))
    model.steps = tf.Variable(np.int64(0))
    other = tf.Module()
    other.scale = tf.Variable(np.zeros(1, np.float16))
    return model, other


def test_tf_restores_a_converted_safetensors_file_with_assert_consumed(tmp_path) -> None:
    src = str(tmp_path / "w.safetensors")
    safetensors_numpy.save_file(_weights(), src)
    prefix = str(tmp_path / "ckpt")
    tp.convert(src, prefix)
    model, other = _tf_modules()
    # restore() creates a save_counter: the converted checkpoint has one (0), so everything is consumed.
    checkpoint = tf.train.Checkpoint(model=model, optimizer_free=other)
    checkpoint.restore(prefix).assert_consumed()
    assert np.array_equal(model.encoder.dense.kernel.numpy(), _weights()["model.encoder.dense.kernel"])
    assert model.steps.numpy() == 7 and other.scale.numpy()[0] == np.float16(1.5)
    assert int(checkpoint.save_counter.numpy()) == 0
    assert checkpoint.save(str(tmp_path / "next")).endswith("next-1")  # and training carries on from it
    # tf.train.load_variable reads every key trackpoint wrote
    assert np.array_equal(
        tf.train.load_variable(prefix, "model/head/w/.ATTRIBUTES/VARIABLE_VALUE"), _weights()["model.head.w"]
    )


def test_tf_reads_a_conversion_without_save_counter_with_assert_consumed(tmp_path) -> None:
    src = str(tmp_path / "w.safetensors")
    safetensors_numpy.save_file(_weights(), src)
    prefix = str(tmp_path / "ckpt")
    tp.convert(src, prefix, save_counter=False)
    model, other = _tf_modules()
    tf.train.Checkpoint(model=model, optimizer_free=other).read(prefix).assert_consumed()
    assert np.array_equal(model.head.w.numpy(), _weights()["model.head.w"])


def test_a_tf_checkpoint_with_sliced_variables_converts_to_safetensors_and_back(tmp_path) -> None:
    model = tf.Module()
    model.big = tf.Variable(np.arange(40, dtype=np.float32).reshape(10, 4))
    model.small = tf.Variable(np.ones(3, np.float64))
    options = tf.train.CheckpointOptions(experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(64))
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "tf"), options=options)
    result = tp.convert(path, str(tmp_path / "hf"))
    loaded = safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(loaded) == ["model.big", "model.small"] == sorted(r.name for r in result.mapping)
    assert np.array_equal(loaded["model.big"], model.big.numpy())
    # and back, into a fresh TF module
    tp.convert(str(tmp_path / "hf"), str(tmp_path / "back"))
    fresh = tf.Module()
    fresh.big = tf.Variable(np.zeros((10, 4), np.float32))
    fresh.small = tf.Variable(np.zeros(3))
    tf.train.Checkpoint(model=fresh).restore(str(tmp_path / "back")).assert_consumed()
    assert np.array_equal(fresh.big.numpy(), model.big.numpy())


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
    import keras

    def build() -> tuple[keras.Model, keras.optimizers.Optimizer]:
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        optimizer = keras.optimizers.Adam(0.01)
        optimizer.build(model.trainable_variables)
        return model, optimizer

    model, optimizer = build()
    model.set_weights([np.full(w.shape, i + 1, np.float32) for i, w in enumerate(model.get_weights())])
    optimizer.apply_gradients([(tf.ones_like(v), v) for v in model.trainable_variables])
    prefix = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "tf" / "ckpt"))
    tp.convert(prefix, str(tmp_path / "hf"), include_graph=True)
    back = str(tmp_path / "back" / "ckpt")
    tp.convert(str(tmp_path / "hf"), back)
    fresh, fresh_optimizer = build()
    tf.train.Checkpoint(model=fresh, optimizer=fresh_optimizer).read(back).assert_consumed()
    for a, b in zip(model.weights + optimizer.variables, fresh.weights + fresh_optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
