"""trackpoint: TensorFlow's object-based checkpoints in pure Python on numpy.

Reads and writes the exact files ``tf.train.Checkpoint`` writes, without importing TensorFlow.

Example:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> _ = tp.save_tensors(prefix, {"w": np.eye(2, dtype=np.float32)})
    >>> tp.load_variable(prefix, "w")
    array([[1., 0.],
           [0., 1.]], dtype=float32)
"""

from trackpoint import errors, optimizers, sharding
from trackpoint._graph.status import CheckpointLoadStatus, InitializationOnlyStatus, RestoreReport
from trackpoint._tracking.autotrackable import AutoTrackable, Module
from trackpoint._tracking.base import NoDependency, Trackable
from trackpoint._tracking.python_state import PythonState
from trackpoint._tracking.variables import Variable
from trackpoint.checkpoint import Checkpoint
from trackpoint.checkpoint_view import CheckpointDiff, CheckpointView, ValueChange
from trackpoint.manager import CheckpointManager
from trackpoint.options import CheckpointOptions
from trackpoint.split_dependency import split_dependency
from trackpoint.reader import (
    CheckpointReader,
    CheckpointState,
    Damage,
    get_checkpoint_state,
    latest_checkpoint,
    list_variables,
    load_checkpoint,
    load_variable,
    repair_checkpoint,
    save_tensors,
    verify_checkpoint,
)

__version__ = "0.1.0"

__all__ = [
    "AutoTrackable",
    "Checkpoint",
    "CheckpointDiff",
    "CheckpointLoadStatus",
    "CheckpointManager",
    "CheckpointOptions",
    "CheckpointReader",
    "CheckpointState",
    "CheckpointView",
    "Damage",
    "InitializationOnlyStatus",
    "Module",
    "NoDependency",
    "PythonState",
    "RestoreReport",
    "Trackable",
    "ValueChange",
    "Variable",
    "errors",
    "get_checkpoint_state",
    "latest_checkpoint",
    "list_variables",
    "load_checkpoint",
    "load_variable",
    "optimizers",
    "repair_checkpoint",
    "save_tensors",
    "sharding",
    "split_dependency",
    "verify_checkpoint",
]
