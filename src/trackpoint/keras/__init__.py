"""Keras 3 on any backend and trackpoint: Keras 2 checkpoints into Keras 3, and Keras 3 checkpoints.

``import trackpoint.keras`` imports neither Keras nor TensorFlow: its functions and classes take
the Keras 3 objects they are given (``pip install "trackpoint[keras]"``), and ``ModelCheckpoint``
imports Keras when it is first asked for.

- :func:`restore`: what Keras 2 wrote in TensorFlow's format (``save_weights``,
  ``ModelCheckpoint(save_weights_only=True)``, ``tf.train.Checkpoint(model=..., optimizer=...)``)
  into a built Keras 3 model and its optimizer, with no TensorFlow.
- :class:`Checkpoint`: ``tp.Checkpoint`` for Keras 3 models, layers, optimizers and variables, so
  ``CheckpointManager``, async saves and object stores work for them; TensorFlow reads the files.
- ``ModelCheckpoint(directory, max_to_keep=5, save_freq="epoch", enable_async=False)``: a Keras
  callback saving through a ``CheckpointManager``.
"""

from __future__ import annotations

from typing import Any

from trackpoint.keras._checkpoint import Checkpoint, model_checkpoint_class
from trackpoint.keras._nodes import LayerNode, OptimizerNode, VariableNode
from trackpoint.keras._restore import RestoreReport, restore

__all__ = ["Checkpoint", "LayerNode", "ModelCheckpoint", "OptimizerNode", "RestoreReport", "VariableNode", "restore"]


def __getattr__(name: str) -> Any:
    if name == "ModelCheckpoint":  # a keras.callbacks.Callback: Keras is imported now, not before
        import keras

        cls = model_checkpoint_class(keras.callbacks.Callback)
        cls.__module__ = __name__
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'trackpoint.keras' has no attribute {name!r}")
