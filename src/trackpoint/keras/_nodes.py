"""Keras 3 objects as nodes of a checkpoint's object graph (the extension protocol, ``trackpoint.protocol``).

A model or layer is laid out as Keras 2 laid it out, so the files read like Keras 2's (and
:func:`trackpoint.keras.restore` reads them too): a Sequential or Functional model's layers that
have weights as ``layer_with_weights-N``; every other layer's weights and sublayers by the
attribute that holds them (:mod:`._match` finds them); a layer's random stream (Dropout's seed
state, which Keras 2 did not keep) as ``seed_generator``. An optimizer's per-weight state are slot
variables of those weights (``<weight>/.OPTIMIZER_SLOT/optimizer/momentum``); its step count and
learning rate are children. Each Keras object has one node while it lives (they are cached), so
a restore's bookkeeping stays on it. No Keras module is imported here: the nodes only call the
objects' own methods.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError
from trackpoint.keras._match import layered, own_variables, renamed_for, sublayers
from trackpoint.protocol import VARIABLE_VALUE

__all__ = ["LayerNode", "OptimizerNode", "VariableNode", "node_of"]

# id(Keras object) -> (a weak reference to it, its node): Keras variables compare element-wise,
# so they cannot be dictionary keys; an entry goes when its object does.
_nodes: dict[int, tuple[weakref.ref[Any], Trackable]] = {}


def node_of(obj: Any, make: type[Trackable]) -> Any:
    """The node of the Keras object ``obj`` (made as ``make(obj)`` the first time)."""
    entry = _nodes.get(id(obj))
    if entry is not None and entry[0]() is obj:
        return entry[1]
    key = id(obj)
    node = make(obj)  # type: ignore[call-arg]

    def forget(_: object) -> None:
        _nodes.pop(key, None)

    _nodes[key] = (weakref.ref(obj, forget), node)
    return node


class _Node(Trackable):
    def __init__(self, obj: Any) -> None:
        self._ref = weakref.ref(obj)

    @property
    def obj(self) -> Any:
        obj = self._ref()
        if obj is None:
            raise InvalidArgumentError(f"a Keras object was deleted while its checkpoint node ({self!r}) was in use")
        return obj

    def _lookup_dependency(self, name: str) -> Trackable | None:
        return self._trackable_children().get(name)


class VariableNode(_Node):
    """A Keras variable: its value saved (a copy to host memory), restored by ``assign``."""

    def __repr__(self) -> str:
        obj = self._ref()
        return f"<trackpoint.keras.VariableNode {obj.path if obj is not None else 'deleted'!r}>"

    def _trackable_children(self) -> dict[str, Trackable]:
        return {}

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return (VARIABLE_VALUE,)

    def _checkpoint_full_name(self) -> str:
        return str(self.obj.path)

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {VARIABLE_VALUE: np.asarray(self.obj.numpy())}

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> np.ndarray:
        variable = self.obj
        value = np.asarray(tensors[VARIABLE_VALUE])
        dtype = np.dtype(str(variable.dtype))
        if value.shape != tuple(variable.shape):
            raise InvalidArgumentError(
                f"{variable.path} is {dtype.name}{list(variable.shape)}, the checkpoint holds "
                f"{value.dtype.name}{list(value.shape)}"
            )
        if value.dtype != dtype:
            if not (value.dtype.kind == dtype.kind == "i" and np.can_cast(np.min_scalar_type(value.max()), dtype)):
                raise InvalidArgumentError(f"{variable.path} is {dtype.name}, the checkpoint holds {value.dtype.name}")
            value = value.astype(dtype)  # a step counter: int64 saved, int32 on some backends
        return value

    def _tp_take_restored(self, checked: np.ndarray) -> None:
        self.obj.assign(checked)


class LayerNode(_Node):
    """A Keras model or layer, laid out as Keras 2 laid it out (see the module docstring)."""

    def __repr__(self) -> str:
        obj = self._ref()
        return f"<trackpoint.keras.LayerNode {getattr(obj, 'name', 'deleted')!r}>"

    def _trackable_children(self) -> dict[str, Trackable]:
        layer = self.obj
        if layered(layer):
            weighted = [sub for sub in layer.layers if sub.weights]
            out = {f"layer_with_weights-{i}": node_of(sub, LayerNode) for i, sub in enumerate(weighted)}
            for i, sub in enumerate(layer.layers):  # a Dropout's random stream, as Keras 2's layer-N
                if not sub.weights and getattr(sub, "_seed_generators", None):
                    out[f"layer-{i}"] = node_of(sub, LayerNode)
            return out
        names = renamed_for(layer)
        children: dict[str, Trackable] = {}
        for attribute, variable in own_variables(layer):
            children[names.get(attribute, attribute)] = node_of(variable, VariableNode)
        for index, seeds in enumerate(getattr(layer, "_seed_generators", None) or []):
            # Dropout's random stream (Keras 3 keeps it in a variable): resumed exactly too.
            state = getattr(seeds, "state", None)
            if state is not None:
                children[f"seed_generator_{index}" if index else "seed_generator"] = node_of(state, VariableNode)
        for path, sub in sublayers(layer):
            if len(path) == 1:
                children[path[0]] = node_of(sub, LayerNode)
            else:  # a list of layers: one node for the list, its items by index
                holder = children.setdefault(path[0], _ListNode())
                if isinstance(holder, _ListNode):
                    holder.items[path[1]] = node_of(sub, LayerNode)
        return children


class _ListNode(Trackable):
    """A list of layers held by one attribute (``self.blocks = [...]``), items by index."""

    def __init__(self) -> None:
        self.items: dict[str, Trackable] = {}

    def _trackable_children(self) -> dict[str, Trackable]:
        return dict(self.items)

    def _lookup_dependency(self, name: str) -> Trackable | None:
        return self.items.get(name)


class OptimizerNode(_Node):
    """A Keras 3 optimizer: ``iterations`` and ``learning_rate`` children, per-weight state as slots."""

    def __repr__(self) -> str:
        obj = self._ref()
        return f"<trackpoint.keras.OptimizerNode {getattr(obj, 'name', 'deleted')!r}>"

    def _trackable_children(self) -> dict[str, Trackable]:
        optimizer = self.obj
        children: dict[str, Trackable] = {"iterations": node_of(optimizer.iterations, VariableNode)}
        rate = getattr(optimizer, "_learning_rate", None)
        if type(rate).__name__ == "Variable" or hasattr(rate, "assign"):
            children["learning_rate"] = node_of(rate, VariableNode)
        return children

    def _slots(self) -> dict[tuple[int, str], Any]:
        """``(id(weight), slot name)`` -> slot variable: Keras names a slot ``<weight path>_<name>``."""
        optimizer = self.obj
        by_name = {v.name: v for v in optimizer.variables}
        out = {}
        for weight in getattr(optimizer, "_trainable_variables", []):
            stem = weight.path.replace("/", "_") + "_"
            for name, variable in by_name.items():
                if name.startswith(stem) and "/" not in name[len(stem) :]:
                    out[(id(weight), name[len(stem) :])] = variable
        return out

    def get_slot_names(self) -> list[str]:
        return sorted({name for _, name in self._slots()})

    def _tp_slots_of(self, objects: Any) -> list[tuple[str, int, Trackable]]:
        """Every slot of the weights among ``objects`` at once (``protocol.BulkSlots``): by slot
        name, then in the objects' order."""
        slots = self._slots()
        out = []
        for name in sorted({name for _, name in slots}):
            for index, obj in enumerate(objects):
                variable = obj._ref() if isinstance(obj, VariableNode) else None
                slot = slots.get((id(variable), name)) if variable is not None else None
                if slot is not None:
                    out.append((name, index, node_of(slot, VariableNode)))
        return out

    def get_slot(self, var: Any, name: str) -> Trackable | None:
        if not isinstance(var, VariableNode):
            return None
        variable = var._ref()
        slot = self._slots().get((id(variable), name)) if variable is not None else None
        return node_of(slot, VariableNode) if slot is not None else None

    def _create_or_restore_slot_variable(self, position: Any, variable: Any, slot_name: str) -> Trackable | None:
        # The optimizer is built when the checkpoint is made (see Checkpoint): a slot it lacks
        # now is one Keras does not keep for that weight.
        return self.get_slot(variable, slot_name)
