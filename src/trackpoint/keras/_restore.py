"""``trackpoint.keras.restore``: a Keras 2 checkpoint (TF format) into a Keras 3 model, on any backend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import trackpoint as tp
from trackpoint.errors import InvalidArgumentError
from trackpoint.keras._match import Matches, match_model, match_optimizer, model_node, optimizer_node

__all__ = ["RestoreReport", "restore"]

#: Root children that are bookkeeping, never a model's weights.
_BOOKKEEPING = frozenset({"save_counter", "optimizer", "keras_api", "train_function", "train_tf_function"})


@dataclass(frozen=True)
class RestoreReport:
    """What :func:`restore` did and could not do.

    Attributes:
        restored: Keras 3 variable path -> the checkpoint key it took its value from.
        missing: Keras 3 variables (model, and optimizer when given) the checkpoint has no value for.
        unexpected: Checkpoint paths of weights and optimizer slots no Keras 3 variable took
            (bookkeeping such as ``save_counter``, the learning rate or ``beta_1`` is not listed).
        mismatched: ``"<variable>: <here> here, <there> in the checkpoint"`` for dtype or shape differences.
    """

    restored: Mapping[str, str]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    mismatched: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Whether every variable took a value and every weight found one."""
        return not (self.missing or self.unexpected or self.mismatched)


def restore(
    model: Any,
    path: str,
    optimizer: Any = None,
    strict: bool = True,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> RestoreReport:
    """Restore what Keras 2 saved in TensorFlow's format into a built Keras 3 model (and optimizer).

    Reads ``model.save_weights(prefix)``, ``ModelCheckpoint(save_weights_only=True)`` and
    ``tf.train.Checkpoint(model=..., optimizer=...)`` checkpoints, with no TensorFlow, into a
    model of the same architecture on the JAX, PyTorch or TensorFlow backend. Layers pair as
    Keras 2 tracked them (see :mod:`trackpoint.keras._match`). With ``optimizer``, its
    iteration count and slots (Adam/AdamW moments, SGD momentum, RMSprop) too, so training goes
    on as it would have in Keras 2; an optimizer not built yet is built for the model's
    trainable variables first. Hyperparameters (learning rate, ``beta_1``...) are the Keras 3
    optimizer's own.

    All or nothing: every value is read (checksums verified) and compared before any variable
    changes.

    Args:
        model: A built Keras 3 model.
        path: A checkpoint prefix, a directory with a ``checkpoint`` file, or a URL.
        optimizer: A Keras 3 optimizer to restore too, or None.
        strict: Raise when anything is missing, unexpected or mismatched (nothing is changed);
            without it, restore what matches and report the rest.
        storage_options: For a URL, options of its fsspec filesystem.

    Returns:
        A :class:`RestoreReport`.

    Raises:
        InvalidArgumentError: With ``strict``, names every missing, unexpected and mismatched
            value; the model is not built; or the checkpoint has no object graph (a TF1
            checkpoint: use ``tp.Checkpoint.restore``).
        NotFoundError: Nothing at ``path``.
        DataLossError: A value is damaged, naming the file and key.

    Examples:
        A Keras 2 ``Sequential([Dense(5, relu), Dense(2)])`` with its first layer frozen, trained
        with the legacy Adam (a fixture of ``tests/keras``), into the same model built with Keras 3:

        >>> import os
        >>> os.environ.setdefault("KERAS_BACKEND", "jax")
        'jax'
        >>> import keras, trackpoint.keras as tpk
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="relu"), keras.layers.Dense(2)])
        >>> model.layers[0].trainable = False
        >>> optimizer = keras.optimizers.Adam()
        >>> report = tpk.restore(model, "tests/golden/keras2/frozen/sw", optimizer=optimizer)
        >>> report.complete, len(report.restored), int(optimizer.iterations.numpy())
        (True, 9, 4)
    """
    if not getattr(model, "built", True) or not model.weights:
        raise InvalidArgumentError(
            f"{path}: the Keras 3 model has no weights yet; build it first (call it on a batch, or give it an "
            "Input), then restore into it"
        )
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    with tp.CheckpointView(path, storage_options=storage_options) as view:
        model_id = model_node(view)
        found = match_model(view, model, model_id)
        unexpected = _unclaimed(view, model_id, found)
        opt_found = Matches()
        if optimizer is not None:
            opt_id = optimizer_node(view, model_id)
            opt_found = match_optimizer(view, optimizer, opt_id, found)
            if opt_id is not None:
                unexpected += _unclaimed_slots(view, opt_id, opt_found)
        pairs = [
            (variable, view.attributes(node)["VARIABLE_VALUE"]) for variable, node in found.pairs + opt_found.pairs
        ]
        mismatches = {id(v): why for v, key in pairs if (why := _mismatch(v, view.describe(key))) is not None}
        resolved = view.prefix
    missing = tuple(found.missing + opt_found.missing)
    mismatched = list(mismatches.values())
    if strict and (missing or unexpected or mismatched):
        raise _differ(resolved, missing, unexpected, mismatched)
    pairs = [(variable, key) for variable, key in pairs if id(variable) not in mismatches]
    with tp.load_checkpoint(resolved) as reader:  # every value read and checked before any changes
        values = [_value(variable, reader.get_tensor(key), key, resolved) for variable, key in pairs]
    for (variable, _), value in zip(pairs, values):
        variable.assign(value)
    return RestoreReport(
        restored={variable.path: key for variable, key in pairs},
        missing=missing,
        unexpected=tuple(unexpected),
        mismatched=tuple(mismatched),
    )


def _mismatch(variable: Any, stored: tuple[str, list[int], int]) -> str | None:
    dtype, shape, _ = stored
    here, there = f"{variable.dtype}{list(variable.shape)}", f"{dtype}{shape}"
    if here == there or (_counter(variable) and dtype.startswith("int") and shape == list(variable.shape)):
        return None  # a step counter: int64 in Keras 2, int32 on some Keras 3 backends (checked on assignment)
    return f"{variable.path}: {here} here, {there} in the checkpoint"


def _counter(variable: Any) -> bool:
    return str(variable.dtype).startswith("int") and variable.name == "iteration"


def _value(variable: Any, value: Any, key: str, prefix: str) -> np.ndarray:
    """``value`` as ``variable`` takes it: a step counter in its own integer dtype, if it fits."""
    array = np.asarray(value)
    if _counter(variable) and array.dtype != np.dtype(str(variable.dtype)):
        limits = np.iinfo(np.dtype(str(variable.dtype)))
        if not limits.min <= int(array) <= limits.max:
            raise InvalidArgumentError(
                f"{prefix}: {key} holds {int(array)} steps, more than {variable.path} ({variable.dtype}) can count",
                path=prefix,
                key=key,
            )
        array = array.astype(np.dtype(str(variable.dtype)))
    return array


def _unclaimed(view: tp.CheckpointView, model_id: int, found: Matches) -> list[str]:
    """Checkpoint paths of the weights below the model's node that no variable took."""
    below = view.values_below(model_id, skip=_BOOKKEEPING | {"root"})
    keys = (key for node, key in below.items() if node not in found.claimed)
    return sorted(key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE") for key in keys)


def _unclaimed_slots(view: tp.CheckpointView, opt_id: int, found: Matches) -> list[str]:
    """Checkpoint paths of the optimizer's slots (not its bookkeeping) that no variable took."""
    graph = view.object_graph
    nodes = [ref.slot_variable_node_id for ref in graph.nodes[opt_id].slot_variables]
    listed = view.children(opt_id).get("_variables")
    if listed is not None:
        nodes += [n for n in view.children(listed).values() if graph.nodes[n].attributes[0].full_name.count("/") >= 2]
    keys = [view.attributes(n)["VARIABLE_VALUE"] for n in dict.fromkeys(nodes) if n not in found.claimed]
    return sorted(key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE") for key in keys)


def _differ(
    prefix: str, missing: tuple[str, ...], unexpected: list[str], mismatched: list[str]
) -> InvalidArgumentError:
    lines = [f"{prefix}: the Keras 3 model and the Keras 2 checkpoint differ; nothing was restored"]
    if missing:
        lines.append("missing from the checkpoint: " + ", ".join(missing))
    if unexpected:
        lines.append("in the checkpoint but not the model: " + ", ".join(unexpected))
    lines.extend(mismatched)
    lines.append("build the same architecture as the checkpoint's, or pass strict=False to restore what matches")
    return InvalidArgumentError("\n".join(lines), path=prefix)
