"""Migrate a Keras 2 training checkpoint (TensorFlow format) to Keras 3 on JAX, without TensorFlow.

Keras 3 refuses these files ("File format not supported"); trackpoint reads them. Build the same
architecture in Keras 3, restore weights and optimizer state, and save a native Keras 3 file.

Run: ``KERAS_BACKEND=jax python examples/keras2_to_keras3.py CHECKPOINT OUT.keras``
(``pip install "trackpoint[keras]" jax``). By default it migrates the small CNN that
``tests/keras/make_keras2.py`` trained in Keras 2: ``tests/golden/keras2/cnn/sw``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras

import trackpoint.keras as tpk


def migrate(checkpoint: str, out: str) -> tpk.RestoreReport:
    """Restore ``checkpoint`` into the Keras 3 twin of its model and save that as ``out``."""
    layers = keras.layers
    model = keras.Sequential(  # the architecture the Keras 2 model had
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
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    report = tpk.restore(model, checkpoint, optimizer=model.optimizer)  # strict: raises on any difference
    model.save(out)  # weights, optimizer state and architecture, in Keras 3's own format
    print(f"restored {len(report.restored)} variables from {checkpoint}; saved {out}")
    return report


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "tests", "golden", "keras2", "cnn", "sw")
    migrate(sys.argv[1] if len(sys.argv) > 1 else default, sys.argv[2] if len(sys.argv) > 2 else "migrated.keras")
