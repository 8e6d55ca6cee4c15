"""The stand-in module tree: ``tensorflow`` and the submodules checkpoint scripts import.

Each module is a :class:`StandIn`: the names it has are trackpoint's own functions and classes
(the same objects as ``tp.load_variable``, ``tp.errors.NotFoundError``, ...), and any other
attribute raises ``AttributeError`` that says what is covered, so a script that needs the real
TensorFlow fails at its first such line and says why. Every module has a real
``importlib.machinery.ModuleSpec``: ``importlib.util.find_spec("tensorflow")`` answers while it
stands in, as importing transformers asks.
"""

from __future__ import annotations

import importlib.machinery
import types
from typing import Any

import trackpoint as tp
from trackpoint.compat import _gfile

__all__ = ["MODULES", "TF_VERSION", "StandIn"]

#: ``__version__``: the TensorFlow release whose checkpoint behaviour trackpoint follows.
TF_VERSION = "2.21.0"


class StandIn(types.ModuleType):
    """A module of the stand-in: what it holds, and an ``AttributeError`` naming what is covered
    for anything else.

    Examples:
        >>> from trackpoint.compat import tensorflow as tf
        >>> tf.train.load_variable is tp.load_variable
        True
        >>> tf.nn
        Traceback (most recent call last):
        ...
        AttributeError: module 'tensorflow' is trackpoint's stand-in for TensorFlow's checkpoint functions and has no attribute 'nn'. It covers: __version__, compat, errors, io, train. A script that needs tensorflow.nn needs the real TensorFlow (pip install tensorflow-cpu).
    """

    def __init__(self, name: str, doc: str, members: dict[str, Any]) -> None:
        super().__init__(name, doc)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        self.__path__: list[str] = []  # a package (submodules are imported from sys.modules)
        self.__package__ = name
        for key, value in members.items():
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # the protocols Python probes for (__file__, __wrapped__, ...)
        names = sorted(key for key in vars(self) if not key.startswith("_"))
        covered = ", ".join(["__version__", *names] if "__version__" in vars(self) else names)
        raise AttributeError(
            f"module {self.__name__!r} is trackpoint's stand-in for TensorFlow's checkpoint functions and has no "
            f"attribute {name!r}. It covers: {covered}. A script that needs {self.__name__}.{name} needs the real "
            "TensorFlow (pip install tensorflow-cpu)."
        )

    def __dir__(self) -> list[str]:
        return sorted(vars(self))


def _build() -> dict[str, StandIn]:
    """Every module of the tree, by its name in ``sys.modules``."""
    errors = StandIn(
        "tensorflow.errors",
        "TensorFlow's error classes: trackpoint's, all under OpError (tp.errors.CheckpointError).",
        {
            "OpError": tp.errors.CheckpointError,
            "NotFoundError": tp.errors.NotFoundError,
            "DataLossError": tp.errors.DataLossError,
            "InvalidArgumentError": tp.errors.InvalidArgumentError,
            "PermissionDeniedError": tp.errors.PermissionDeniedError,
            "UnavailableError": tp.errors.UnavailableError,
            "DeadlineExceededError": tp.errors.DeadlineExceededError,
        },
    )
    gfile = StandIn(
        "tensorflow.io.gfile",
        "tf.io.gfile's calls that checkpoint scripts use.",
        {name: getattr(_gfile, name) for name in ("exists", "glob", "isdir", "listdir", "GFile")},
    )
    io = StandIn("tensorflow.io", "tf.io: gfile.", {"gfile": gfile})
    readers = {
        "list_variables": tp.list_variables,
        "load_variable": tp.load_variable,
        "latest_checkpoint": tp.latest_checkpoint,
        "get_checkpoint_state": tp.get_checkpoint_state,
    }
    train = StandIn(
        "tensorflow.train",
        "tf.train's checkpoint functions and classes.",
        {
            **readers,
            "load_checkpoint": tp.load_checkpoint,
            "Checkpoint": tp.Checkpoint,
            "CheckpointManager": tp.CheckpointManager,
            "CheckpointOptions": tp.CheckpointOptions,
            "CheckpointView": tp.CheckpointView,
        },
    )
    v1_train = StandIn(
        "tensorflow.compat.v1.train",
        "tf.compat.v1.train's checkpoint readers.",
        {**readers, "NewCheckpointReader": tp.CheckpointReader},
    )
    v1 = StandIn(
        "tensorflow.compat.v1", "tf.compat.v1: train, errors, io.", {"train": v1_train, "errors": errors, "io": io}
    )
    compat = StandIn("tensorflow.compat", "tf.compat: v1.", {"v1": v1})
    root = StandIn(
        "tensorflow",
        "trackpoint's stand-in for TensorFlow's checkpoint functions (see trackpoint.compat).",
        {"train": train, "compat": compat, "errors": errors, "io": io, "__version__": TF_VERSION},
    )
    return {module.__name__: module for module in (root, train, compat, v1, v1_train, errors, io, gfile)}


#: The stand-in's modules by name; ``MODULES["tensorflow"]`` is the root.
MODULES = _build()
