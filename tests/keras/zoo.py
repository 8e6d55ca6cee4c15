"""The Keras model zoo of the Keras 2 to Keras 3 tests, written once for both: ``build(name, keras)``
takes the ``keras`` module (``tf_keras`` when the fixtures are made, Keras 3 when they are restored).

Neither this module nor its callers import TensorFlow: the module is passed in.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

#: For the Keras 3 processes on JAX: XLA compiles each op of these tiny models on first use, which
#: takes most of their time; unoptimized, in a third less (their numbers stay within the tolerances).
FAST_XLA = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"

#: Each model, and the optimizer it trains with in Keras 2 (``legacy_adam``: Keras 2's legacy optimizer,
#: which keeps slot variables; Keras 3 has only the one Adam).
MODELS = {
    "cnn": "adam",
    "two_inputs": "sgd_momentum",
    "lstm": "adamw",
    "gru": "rmsprop",
    "transformer": "adam",
    "subclassed": "sgd_momentum",
    "nested": "adam",
    "frozen": "legacy_adam",
}


def optimizer(name: str, keras: ModuleType, legacy: bool = False) -> Any:
    """The optimizer ``MODELS[name]`` names (legacy Adam only where ``legacy`` and Keras 2 has it)."""
    kind = MODELS[name]
    if kind == "legacy_adam":
        return keras.optimizers.legacy.Adam(0.01) if legacy else keras.optimizers.Adam(0.01)
    if kind == "adam":
        return keras.optimizers.Adam(0.01)
    if kind == "adamw":
        return keras.optimizers.AdamW(0.01, weight_decay=0.05)
    if kind == "rmsprop":
        return keras.optimizers.RMSprop(0.01, momentum=0.5)
    return keras.optimizers.SGD(0.05, momentum=0.9)


def data(name: str, count: int = 8) -> tuple[Any, np.ndarray]:
    """Inputs and targets for ``name``, the same on both sides."""
    rng = np.random.default_rng(sum(map(ord, name)))
    shapes = {
        "cnn": (8, 8, 2),
        "lstm": None,
        "gru": (6, 3),
        "transformer": (5, 8),
    }
    if name == "two_inputs":
        x: Any = [rng.random((count, 4), np.float32), rng.random((count, 3), np.float32)]
    elif name == "lstm":
        x = rng.integers(0, 20, (count, 6)).astype(np.int32)
    else:
        x = rng.random((count, *(shapes.get(name) or (4,))), np.float32)
    outputs = {"cnn": 3, "nested": 2}.get(name, 2)
    return x, rng.random((count, outputs), np.float32)


def build(name: str, keras: ModuleType) -> Any:
    """The model ``name``, built (its weights exist)."""
    layers = keras.layers
    if name == "cnn":
        return keras.Sequential(
            [
                keras.Input((8, 8, 2)),
                layers.Conv2D(4, 3),
                layers.BatchNormalization(),
                layers.DepthwiseConv2D(3),
                layers.Dropout(0.25),
                layers.Flatten(),
                layers.Dense(3),
            ]
        )
    if name == "two_inputs":
        a, b = keras.Input((4,)), keras.Input((3,))
        joined = layers.Concatenate()([layers.Dense(5, activation="relu")(a), layers.Dense(5, activation="tanh")(b)])
        return keras.Model([a, b], layers.Dense(2)(joined))
    if name == "lstm":
        return keras.Sequential(
            [keras.Input((6,), dtype="int32"), layers.Embedding(20, 4), layers.LSTM(5), layers.Dense(2)]
        )
    if name == "gru":
        return keras.Sequential(
            [keras.Input((6, 3)), layers.GRU(4, return_sequences=True), layers.GRU(3), layers.Dense(2)]
        )
    if name == "transformer":
        inputs = keras.Input((5, 8))
        attended = layers.MultiHeadAttention(num_heads=2, key_dim=4)(inputs, inputs)
        x = layers.LayerNormalization()(layers.Add()([inputs, attended]))
        ff = layers.Dense(8)(layers.Dense(16, activation="relu")(x))
        x = layers.LayerNormalization()(layers.Add()([x, ff]))
        return keras.Model(inputs, layers.Dense(2)(layers.GlobalAveragePooling1D()(x)))
    if name == "subclassed":
        model = _subclassed(keras)()
        model(np.zeros((1, 4), np.float32))
        return model
    if name == "nested":
        inner = keras.Sequential([keras.Input((4,)), layers.Dense(6, activation="relu"), layers.Dense(3)])
        inputs = keras.Input((4,))
        return keras.Model(inputs, layers.Dense(2)(inner(inputs)))
    if name == "frozen":
        model = keras.Sequential([keras.Input((4,)), layers.Dense(5, activation="relu"), layers.Dense(2)])
        model.layers[0].trainable = False
        return model
    raise KeyError(name)


def _subclassed(keras: ModuleType) -> type:
    class Scaled(keras.Model):
        """A subclassed model: layers by attribute, and a weight of its own."""

        def __init__(self) -> None:
            super().__init__()
            self.hidden = keras.layers.Dense(4, activation="tanh")
            self.head = keras.layers.Dense(2)
            self.scale = self.add_weight(name="scale", shape=(4,), initializer="ones")

        def call(self, inputs: Any) -> Any:
            return self.head(self.hidden(inputs) * self.scale)

    return Scaled


#: How the loss after one more step is measured, on both sides: Dropout off (its masks are random),
#: and in training mode, so that BatchNormalization normalizes by the batch. In inference mode it
#: would use its moving variance, which Keras 2's fused kernel updates with the unbiased batch
#: variance (times n/(n-1)) and Keras 3 with the biased one: the two differ after any step.
LOSS_AFTER = "training mode, Dropout off"


def no_dropout(model: Any) -> None:
    """Set every Dropout's rate to 0, so a training step is the same on both sides."""
    for layer in model.layers:
        if type(layer).__name__ == "Dropout":
            layer.rate = 0.0
