"""Torch modules and tensors as nodes of the object graph.

A :class:`ModuleNode` stands for an ``nn.Module``: its children are read from the module
each time they are asked for (parameters, then persistent buffers, then the extra state,
then submodules: ``state_dict``'s order), so the graph always follows the live module. A
:class:`TensorNode` stands for one tensor and is saved as a variable
(``<path>/.ATTRIBUTES/VARIABLE_VALUE``). Each torch object has one node for as long as it
lives (:func:`tensor_node`, :func:`module_node`): a weight tied into two modules is one
tensor, so one node with two parents, stored once. The nodes hold their torch objects
weakly; the torch objects never refer to their nodes (an attribute on a tensor would go
into every ``torch.save`` of it).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch
from torch.nn.parameter import is_lazy

from trackpoint import Trackable
from trackpoint._io import bounded_json
from trackpoint.errors import InvalidArgumentError
from trackpoint.protocol import PYTHON_STATE, VARIABLE_VALUE
from trackpoint.torch import _hooks
from trackpoint.torch._tensors import as_array, check_value, copy_into, destination, new_tensor

__all__ = [
    "EXTRA_STATE",
    "ModuleNode",
    "TensorNode",
    "extra_state_node",
    "has_extra_state",
    "module_node",
    "tensor_node",
    "unwrap",
]

#: The child that holds a module's ``get_extra_state()``, under torch's own name for it.
EXTRA_STATE = "_extra_state"
_EXTRA_KINDS = (VARIABLE_VALUE, "bytes", PYTHON_STATE)


class _Nodes:
    """The node of each live torch object, by identity.

    A dict by ``id`` whose entries leave with their objects (a weak reference's callback),
    rather than ``torch.utils.weak.WeakIdKeyDictionary``, whose lookups build a Python
    object each: a model of 20,000 parameters looks its nodes up several times a save.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def get(self, obj: Any) -> Any:
        entry = self._entries.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    def add(self, obj: Any, node: Any) -> None:
        key = id(obj)
        entries = self._entries

        def gone(ref: weakref.ref[Any]) -> None:
            if entries.get(key, (None,))[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(obj, gone), node)


_tensor_nodes = _Nodes()
_module_nodes = _Nodes()
_extra_nodes = _Nodes()


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The module a wrapper stands for: ``DistributedDataParallel``/``DataParallel``'s
    ``.module`` and ``torch.compile``'s ``_orig_mod``, so that they add nothing to a key."""
    while True:
        inner: object = None
        if isinstance(module, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            inner = module.module
        elif type(module).__name__ == "OptimizedModule":
            inner = getattr(module, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module):
            return module
        module = inner


class TensorNode(Trackable):
    """One torch tensor, saved as a variable: a view of its memory (no copy for a contiguous
    CPU tensor) and restored into that memory, all or nothing with the rest of the restore.

    A lazy module's uninitialized parameter or buffer has no value yet, so it is not saved
    (as an unbuilt Keras layer's variables are not); a restore materializes it with the
    checkpoint's shape, in its own dtype and device, as torch's ``load_state_dict`` does.
    """

    def __init__(self, tensor: torch.Tensor, name: str) -> None:
        self._ref = weakref.ref(tensor)
        self._name = name
        # The array over the tensor's memory last offered to a restore: when the value handed
        # back is that array, the core reads it into place itself (see _tp_take_restored).
        self._offered: np.ndarray | None = None

    @property
    def tensor(self) -> torch.Tensor:
        """The tensor (alive as long as anything reaches this node through the graph)."""
        tensor = self._ref()
        if tensor is None:
            raise InvalidArgumentError(f"the tensor {self._name!r} was deleted while its checkpoint node was in use")
        return tensor

    def __repr__(self) -> str:
        return f"<TensorNode {self._name!r}>"

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return (VARIABLE_VALUE,)

    def _checkpoint_full_name(self) -> str:
        return self._name

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {VARIABLE_VALUE: self._tp_variable_value()}

    def _tp_variable_value(self) -> np.ndarray:
        return as_array(self.tensor, self._name)

    # -- TensorOwner (trackpoint.protocol) ----------------------------------------------

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        tensor = self.tensor
        out = None if is_lazy(tensor) else destination(tensor)  # a lazy one has no memory yet
        self._offered = out
        return {VARIABLE_VALUE: out} if out is not None else {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> np.ndarray:
        tensor = self.tensor
        value = tensors[VARIABLE_VALUE]
        shape = np.shape(value) if is_lazy(tensor) else None  # takes the checkpoint's shape
        return check_value(tensor, value, f"tensor {self._name!r}", shape)

    def _tp_take_restored(self, checked: np.ndarray) -> None:
        offered, self._offered = self._offered, None
        if checked is offered:
            return  # read into the tensor's memory in place
        tensor = self.tensor
        if is_lazy(tensor):
            with torch.no_grad():
                tensor.materialize(checked.shape)
        copy_into(tensor, checked)


def tensor_node(tensor: torch.Tensor, name: str) -> TensorNode:
    """The node of ``tensor`` (made the first time it is asked for; ``name`` is its full name then)."""
    node = _tensor_nodes.get(tensor)
    if node is None:
        node = TensorNode(tensor, name)
        _tensor_nodes.add(tensor, node)
    return node


class ExtraStateNode(Trackable):
    """A module's ``get_extra_state()``: a tensor (``VARIABLE_VALUE``), bytes, or JSON
    (``py_state``); anything else is refused, since it could only be pickled."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._ref = weakref.ref(module)

    def _state(self) -> tuple[str, Any]:
        module = self._ref()
        if module is None:
            raise InvalidArgumentError("a module was deleted while its checkpoint node was in use")
        state = module.get_extra_state()
        if isinstance(state, torch.Tensor):
            return VARIABLE_VALUE, as_array(state, f"{type(module).__name__}.get_extra_state()")
        if isinstance(state, (bytes, bytearray)):
            return "bytes", bytes(state)
        try:
            text = bounded_json.dumps(
                state, f"{type(module).__name__}.get_extra_state()", allow_nan=True, sort_keys=True
            )
            return PYTHON_STATE, text.encode("utf-8")
        except InvalidArgumentError:
            raise  # nested too deep: the message says so
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"{type(module).__name__}.get_extra_state() returned a {type(state).__name__}, which trackpoint "
                f"cannot store ({exc}); return a tensor, bytes, or JSON-compatible data (trackpoint never pickles)"
            ) from exc

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        # Each kind under a name of its own, all asked for: a restore takes whichever the
        # checkpoint holds, whatever the module returns before it is restored.
        return _EXTRA_KINDS

    def _serialize_to_tensors(self) -> dict[str, Any]:
        name, value = self._state()
        return {name: value}

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> Any:
        if VARIABLE_VALUE in tensors:
            return new_tensor(np.asarray(tensors[VARIABLE_VALUE]))
        if "bytes" in tensors:
            return bytes(tensors["bytes"])
        try:
            return bounded_json.loads(tensors[PYTHON_STATE], "the stored extra state")
        except InvalidArgumentError:
            raise  # JSON nested too deep: the message says so
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"the stored extra state is not JSON: {exc}") from exc

    def _tp_take_restored(self, checked: Any) -> None:
        module = self._ref()
        if module is not None:
            module.set_extra_state(checked)


def has_extra_state(module: torch.nn.Module) -> bool:
    """Whether the module's class overrides ``get_extra_state`` (torch saves it only then)."""
    return type(module).get_extra_state is not torch.nn.Module.get_extra_state


class ModuleNode(Trackable):
    """An ``nn.Module``: submodules are children by attribute name, parameters and persistent
    buffers are variables (non-persistent buffers are not saved), the extra state a child
    ``_extra_state``. A child the module lacks when a restore reaches it gets its value when
    it is registered (restore-on-create, :mod:`._hooks`)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._ref = weakref.ref(module)

    @property
    def module(self) -> torch.nn.Module:
        module = self._ref()
        if module is None:
            raise InvalidArgumentError("a module was deleted while its checkpoint node was in use")
        return module

    def __repr__(self) -> str:
        module = self._ref()
        return f"<ModuleNode {type(module).__name__ if module is not None else 'deleted'}>"

    def _trackable_children(self) -> dict[str, Trackable]:
        module = self.module
        children: dict[str, Trackable] = {}
        # Lazy (uninitialized) tensors are left out: they have no value to save. A restore
        # still finds them (_lookup_dependency) and materializes them.
        for name, param in module._parameters.items():
            if param is not None and not is_lazy(param):
                children[name] = tensor_node(param, name)
        skipped = module._non_persistent_buffers_set
        for name, buffer in module._buffers.items():
            if buffer is not None and name not in skipped and not is_lazy(buffer):
                children[name] = tensor_node(buffer, name)
        if has_extra_state(module):
            children[EXTRA_STATE] = extra_state_node(module)
        for name, sub in module._modules.items():
            if sub is not None:
                children[name] = module_node(sub)
        return children

    def _lookup_dependency(self, name: str) -> Trackable | None:
        module = self.module
        param = module._parameters.get(name)
        if param is not None:
            return tensor_node(param, name)
        buffer = module._buffers.get(name)
        if buffer is not None and name not in module._non_persistent_buffers_set:
            return tensor_node(buffer, name)
        if name == EXTRA_STATE and has_extra_state(module):
            return extra_state_node(module)
        sub = module._modules.get(name)
        return module_node(sub) if sub is not None else None

    def _defer_restore(self, name: str | None, position: Any) -> None:
        super()._defer_restore(name, position)
        _hooks.waiting(self.module, self)


def extra_state_node(module: torch.nn.Module) -> ExtraStateNode:
    """The node of ``module``'s ``get_extra_state()`` (made the first time it is asked for)."""
    node = _extra_nodes.get(module)
    if node is None:
        node = ExtraStateNode(module)
        _extra_nodes.add(module, node)
    return node


def module_node(module: torch.nn.Module) -> ModuleNode:
    """The node of ``module`` (of the module a DDP or ``torch.compile`` wrapper stands for)."""
    module = unwrap(module)
    node = _module_nodes.get(module)
    if node is None:
        node = ModuleNode(module)
        _module_nodes.add(module, node)
    return node
