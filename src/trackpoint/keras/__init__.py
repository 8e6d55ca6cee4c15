"""Keras 3 on any backend and trackpoint: Keras 2 checkpoints restored into Keras 3 models.

``import trackpoint.keras`` imports nothing of Keras or TensorFlow itself; its functions take the
Keras 3 objects they are given (``pip install "trackpoint[keras]"``).

- :func:`restore`: what Keras 2 wrote in TensorFlow's format (``save_weights``,
  ``ModelCheckpoint(save_weights_only=True)``, ``tf.train.Checkpoint(model=..., optimizer=...)``)
  into a built Keras 3 model and its optimizer, with no TensorFlow.
"""

from __future__ import annotations

from trackpoint.keras._restore import RestoreReport, restore

__all__ = ["RestoreReport", "restore"]
