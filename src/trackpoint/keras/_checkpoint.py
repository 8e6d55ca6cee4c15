"""``trackpoint.keras.Checkpoint`` and the ``ModelCheckpoint`` callback: Keras 3 objects in ``tp.Checkpoint``."""

from __future__ import annotations

from typing import Any

import trackpoint as tp
from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError
from trackpoint.keras._nodes import LayerNode, OptimizerNode, VariableNode, node_of

__all__ = ["Checkpoint", "model_checkpoint_class"]


def _kind(value: Any) -> str | None:
    """``"layer"``, ``"optimizer"`` or ``"variable"`` for a Keras 3 object, by its classes' names
    (``trackpoint.keras`` imports no Keras)."""
    names = {cls.__name__ for cls in type(value).__mro__ if cls.__module__.startswith("keras")}
    if "Layer" in names:
        return "layer"
    if "BaseOptimizer" in names or "Optimizer" in names:
        return "optimizer"
    if "Variable" in names:
        return "variable"
    return None


def _wrap(name: str, value: Any) -> Any:
    if isinstance(value, Trackable):
        return value
    kind = _kind(value)
    if kind == "layer":
        return node_of(value, LayerNode)
    if kind == "optimizer":
        return node_of(value, OptimizerNode)
    if kind == "variable":
        return node_of(value, VariableNode)
    raise InvalidArgumentError(
        f"Checkpoint argument {name!r} is a {type(value).__name__}: give a Keras 3 model, layer, optimizer or "
        "variable, or a trackpoint object"
    )


class Checkpoint(tp.Checkpoint):
    """``tp.Checkpoint`` for Keras 3 objects, on any backend: models and layers, optimizers, variables.

    Files are TensorFlow checkpoints laid out as Keras 2 laid out its own
    (``model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE``; optimizer state as slot
    variables of the weights: ``.../.OPTIMIZER_SLOT/optimizer/momentum``), so TensorFlow reads
    every weight, and ``CheckpointManager``, async saves, object stores and restore-on-create
    work as for any ``tp.Checkpoint``. An optimizer not built yet is built for the model's
    trainable variables (a ``model`` argument), so that its state exists to save and restore.
    A checkpoint's attributes are the nodes standing for the objects (``ckpt.model.obj`` is the
    model).

    Examples:
        >>> import os, tempfile
        >>> os.environ.setdefault("KERAS_BACKEND", "jax")
        'jax'
        >>> import keras, trackpoint.keras as tpk
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        >>> ckpt = tpk.Checkpoint(model=model, optimizer=keras.optimizers.Adam())
        >>> path = ckpt.save(tempfile.mkdtemp() + "/ckpt")
        >>> _ = model.layers[0].kernel.assign(keras.ops.zeros((3, 2)))
        >>> ckpt.restore(path).assert_consumed().__class__.__name__
        'CheckpointLoadStatus'
        >>> bool(model.layers[0].kernel.numpy().any())
        True
    """

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        model: Any = kwargs.get("model")
        for value in kwargs.values():
            if _kind(value) == "optimizer" and not value.built and _kind(model) == "layer":
                value.build(model.trainable_variables)  # its slots exist from now on
        wrapped = {name: _wrap(name, value) for name, value in kwargs.items()}
        super().__init__(_wrap("root", root) if root is not None else None, **wrapped)
        # The nodes hold their objects weakly (a node must not keep a layer alive); the checkpoint
        # holds what it was given, as tf.train.Checkpoint does.
        object.__setattr__(self, "_tp_keras_objects", [root, *kwargs.values()])

    _tp_keras_objects: list[Any]


def model_checkpoint_class(callback_base: type) -> type:
    """The ``ModelCheckpoint`` callback, on Keras's ``Callback`` class (given: no Keras import here)."""

    class ModelCheckpoint(callback_base):
        """Save the model and its optimizer through a ``tp.CheckpointManager`` while it trains.

        Args:
            directory: Where the checkpoints go (a local path or a URL).
            max_to_keep: How many to keep (the manager deletes older ones).
            save_freq: ``"epoch"``, or a number of batches between saves.
            enable_async: Save in the background (``tp.CheckpointOptions(enable_async=True)``);
                training waits for the last save when it ends.
            **manager_kwargs: More ``tp.CheckpointManager`` arguments (``checkpoint_name``,
                ``keep_checkpoint_every_n_hours``, ``storage_options``...).
        """

        def __init__(
            self,
            directory: str,
            max_to_keep: int | None = 5,
            save_freq: str | int = "epoch",
            enable_async: bool = False,
            **manager_kwargs: Any,
        ) -> None:
            super().__init__()
            if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0):
                raise InvalidArgumentError(f"save_freq={save_freq!r}: give 'epoch' or a positive number of batches")
            self.directory = directory
            self.max_to_keep = max_to_keep
            self.save_freq = save_freq
            self.options = tp.CheckpointOptions(enable_async=enable_async)
            self._manager_kwargs = manager_kwargs
            self.manager: tp.CheckpointManager | None = None
            self._batches = 0

        def on_train_begin(self, logs: Any = None) -> None:
            if self.manager is None:
                checkpoint = Checkpoint(model=self.model, optimizer=self.model.optimizer)
                self.manager = tp.CheckpointManager(
                    checkpoint, self.directory, max_to_keep=self.max_to_keep, **self._manager_kwargs
                )

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._batches += 1
            if isinstance(self.save_freq, int) and self._batches % self.save_freq == 0:
                self._save()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self.save_freq == "epoch":
                self._save()

        def on_train_end(self, logs: Any = None) -> None:
            if self.manager is not None:
                self.manager.checkpoint.sync()  # a background save's failure raises here

        def _save(self) -> None:
            assert self.manager is not None  # made in on_train_begin
            _ = self.model  # on JAX, Keras puts the state of the running epoch back into the variables
            self.manager.save(options=self.options)

    return ModelCheckpoint
