"""PyTorch objects in TensorFlow checkpoints: modules, optimizers, schedulers and RNG, restored by name.

``import trackpoint.torch`` imports torch; ``import trackpoint`` does not.

- :class:`Checkpoint`: ``tp.Checkpoint`` that takes torch objects. Submodules are child
  nodes by attribute name, parameters and persistent buffers variables (saved as views of
  their memory, restored into it), optimizer state slot variables of the parameters (so it
  follows parameters by path, not by index), objects with ``state_dict()`` JSON plus tensors.
- :class:`RNGState`: torch's, numpy's and Python's random generators.
- :func:`load_state_dict`: torch's one-shot, name-by-name load of one module.
- :class:`TFStorageWriter`, :class:`TFStorageReader`: storage for
  ``torch.distributed.checkpoint.save``/``load`` that writes and reads TF checkpoints
  (imported when first used: they import ``torch.distributed.checkpoint``).

Examples:
    >>> import tempfile, torch
    >>> import trackpoint as tp, trackpoint.torch as tpt
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> manager = tp.CheckpointManager(tpt.Checkpoint(model=model, optimizer=opt), tempfile.mkdtemp(), 3)
    >>> manager.restore_or_initialize() is None
    True
    >>> manager.save().endswith("ckpt-1")
    True
"""

from __future__ import annotations

from trackpoint.torch._checkpoint import Checkpoint
from trackpoint.torch._load import IncompatibleKeys, load_state_dict
from trackpoint.torch._nodes import ModuleNode, TensorNode
from trackpoint.torch._optimizer import OptimizerNode
from trackpoint.torch._rng import RNGState
from trackpoint.torch._state import StateDictNode

__all__ = [
    "Checkpoint",
    "IncompatibleKeys",
    "ModuleNode",
    "OptimizerNode",
    "RNGState",
    "StateDictNode",
    "TFStorageReader",
    "TFStorageWriter",
    "TensorNode",
    "load_state_dict",
]


def __getattr__(name: str) -> object:
    if name in ("TFStorageReader", "TFStorageWriter"):
        from trackpoint.torch import _dcp

        return getattr(_dcp, name)
    raise AttributeError(f"module 'trackpoint.torch' has no attribute {name!r}")
