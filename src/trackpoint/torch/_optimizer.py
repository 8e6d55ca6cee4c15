"""A torch optimizer in the object graph: its per-parameter state as slot variables of the parameters.

Why slots: torch keys ``state_dict()["state"]`` by the parameter's index in
``param_groups``, so adding, removing or reordering one parameter breaks
``load_state_dict``. Here every tensor of ``opt.state[p]`` (``exp_avg``, ``exp_avg_sq``,
``momentum_buffer``, ``step``, ...) is a slot variable of ``p``'s own node, as TF links a
slot to its variable, and the ``param_groups`` hyperparameters and any other state are
stored as JSON keyed by each parameter's path (``model.fc.weight``). Tensors inside that
other state (LBFGS keeps lists of them, its history, in its first parameter's state) are
stored beside the JSON as the optimizer's own values (``tensor_0``, ...), named in it by
place. A restore therefore follows the parameters, whatever their order now.

A parameter the optimizer has no state for yet (no step taken, as in a fresh process)
receives the checkpoint's state as torch's ``load_state_dict`` would make it: each value
cast and placed by torch's own rule for its parameter
(``Optimizer._process_value_according_to_param_policy``), and no step is run. The state
arrives slot by slot as the restore reaches each parameter (a parameter created later
brings its own), which is why it is filled in this way rather than by one
``load_state_dict`` call at the end.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError
from trackpoint.protocol import PYTHON_STATE
from trackpoint.torch._json import TensorNames, decode, encode, tensor_name
from trackpoint.torch._nodes import TensorNode, tensor_node
from trackpoint.torch._tensors import as_array, destination, new_tensor, torch_dtype

__all__ = ["OptimizerNode"]

#: Parameter (by ``id``) -> its path in the checkpoint, ``model.fc.weight``.
Names = Callable[[], dict[int, str]]


@dataclass(frozen=True)
class _Restored:
    """What an optimizer takes from a checkpoint: hyperparameters by current group, extra state by parameter."""

    groups: list[tuple[dict[str, Any], dict[str, Any]]]
    state: list[tuple[torch.Tensor, dict[str, Any]]]


def _placed(param: torch.Tensor, group: dict[str, Any], value: Any, key: str | None) -> Any:
    """A restored state value of ``param`` (in ``group``) with each tensor in it cast and placed
    as torch's ``Optimizer.load_state_dict`` places it: by
    ``Optimizer._process_value_according_to_param_policy``, into lists and dicts item by item
    (as its ``_cast`` does: a list's items under no key, a dict's under their own)."""
    if isinstance(value, torch.Tensor):
        policy = getattr(torch.optim.Optimizer, "_process_value_according_to_param_policy", None)
        if policy is not None:
            # It reads only the parameter's own group (its fused and capturable flags), with
            # parameters as state_dict() numbers them: one group holding the parameter as 0.
            return policy(param, value, 0, [{**group, "params": [0]}], key)
        if torch.is_floating_point(param) and torch.is_floating_point(value) and key != "step":
            return value.to(dtype=param.dtype, device=param.device)
        return value
    if isinstance(value, dict):
        return {k: _placed(param, group, v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_placed(param, group, v, None) for v in value)
    return value


def _stored_groups(stored: Any, where: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The stored param group of each parameter path, and the stored extra state by path, checked.

    Raises:
        InvalidArgumentError: The stored state is not what :meth:`OptimizerNode._serialize_to_tensors` writes.
    """
    groups = stored.get("param_groups") if isinstance(stored, dict) else None
    extra = stored.get("state", {}) if isinstance(stored, dict) else None
    if not isinstance(groups, list) or not isinstance(extra, dict):
        raise InvalidArgumentError(f"{where}: the stored state has no list of param_groups")
    group_of: dict[str, dict[str, Any]] = {}
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("params"), list):
            raise InvalidArgumentError(f"{where}: a stored param group has no list of parameter paths")
        for path in group["params"]:
            if not isinstance(path, str):
                raise InvalidArgumentError(f"{where}: a stored param group names a parameter by {path!r}, not a path")
            group_of.setdefault(path, group)
    return group_of, extra


def _read_state_tensor(position: Any) -> torch.Tensor:
    """A new CPU tensor holding the checkpoint's value at ``position``, read straight into its
    memory: torch allocates it, never numpy, whose huge-page advice on large arrays can cost a
    restore into fresh objects seconds of memory compaction (torch's own load never pays it);
    and no second full-size buffer is made. A failed read leaves no tensor behind."""
    spec = position.simple_variable_spec()
    if spec is None:  # a string: new_tensor refuses it, naming its dtype
        return new_tensor(np.asarray(position.simple_variable_value()))
    shape, dtype = spec
    tensor = torch.empty(shape, dtype=torch_dtype(dtype))
    position.simple_variable_value(out=destination(tensor))
    return tensor


class OptimizerNode(Trackable):
    """A ``torch.optim.Optimizer`` (or anything with its ``state``/``param_groups`` protocol); see the module docstring.

    Args:
        optimizer: The optimizer.
        names: The path of each parameter of the checkpoint's modules.
        where: What the optimizer is called in messages (its name in the checkpoint).
    """

    def __init__(self, optimizer: Any, names: Names, where: str) -> None:
        self._ref = weakref.ref(optimizer)
        self._names = names
        self._where = where
        self._places: dict[int, tuple[dict[str, Any], int]] = {}  # see _group_of

    @property
    def optimizer(self) -> Any:
        optimizer = self._ref()
        if optimizer is None:
            raise InvalidArgumentError(
                f"the optimizer {self._where!r} was deleted while its checkpoint node was in use"
            )
        return optimizer

    def __repr__(self) -> str:
        return f"<OptimizerNode {self._where!r}>"

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _group_of(self, param: torch.Tensor) -> dict[str, Any] | None:
        """The param group that holds ``param`` now, or None.

        Asked once per slot a restore creates, so not by a scan of every group (which made a
        restore into a fresh optimizer quadratic: 31 s for 8,000 parameters): each
        parameter's group and place in it are noted once, and a noted place is used only
        while that group is still the optimizer's and holds the parameter there; else the
        places are noted again.
        """
        groups = self.optimizer.param_groups
        place = self._places.get(id(param))
        if place is not None:
            group, index = place
            held = group["params"]
            if index < len(held) and held[index] is param and any(g is group for g in groups):
                return group
        self._places = {id(p): (group, i) for group in groups for i, p in enumerate(group["params"])}
        place = self._places.get(id(param))
        return place[0] if place is not None else None

    # -- slots (trackpoint.protocol.SlotOwner and BulkSlots) ---------------------------

    def get_slot_names(self) -> list[str]:
        state = self.optimizer.state
        names = {k for p in self._params() for k, v in state.get(p, {}).items() if isinstance(v, torch.Tensor)}
        return sorted(names)

    def get_slot(self, var: Any, name: str) -> TensorNode | None:
        # Asked for every object of a save's graph and every slot name: kept to a few lookups.
        if type(var) is not TensorNode:
            return None
        param, optimizer = var._ref(), self._ref()
        state = optimizer.state.get(param) if param is not None and optimizer is not None else None
        value = state.get(name) if state else None
        return self._slot_node(var, name, value) if isinstance(value, torch.Tensor) else None

    def _slot_node(self, var: TensorNode, name: str, value: torch.Tensor) -> TensorNode:
        """The node of state tensor ``value``, slot ``name`` of the parameter ``var`` stands for."""
        return tensor_node(value, f"{var._name}/{self._where}/{name}")

    def _tp_slots_of(self, objects: Sequence[Any]) -> list[tuple[str, int, TensorNode]]:
        """Every slot of the parameters among ``objects``, as ``get_slot`` finds them one by
        one: by slot name, then in the objects' order (``trackpoint.protocol.BulkSlots``)."""
        state = self.optimizer.state
        held = []  # (index, node, its parameter's state) of the parameters with state
        for index, obj in enumerate(objects):
            if type(obj) is TensorNode:
                param = obj._ref()
                param_state = state.get(param) if param is not None else None
                if param_state:
                    held.append((index, obj, param_state))
        names = sorted({k for _, _, st in held for k, v in st.items() if isinstance(v, torch.Tensor)})
        out = []
        for name in names:
            for index, node, param_state in held:
                value = param_state.get(name)
                if isinstance(value, torch.Tensor):
                    out.append((name, index, self._slot_node(node, name, value)))
        return out

    def _create_or_restore_slot_variable(self, position: Any, variable: Any, slot_name: str) -> TensorNode | None:
        """The slot to bind for ``(variable, slot_name)``: the existing state tensor, or one made
        now from the checkpoint's value when the parameter has no such state yet."""
        slot = self.get_slot(variable, slot_name)
        if slot is not None or not isinstance(variable, TensorNode) or not position.is_simple_variable():
            return slot
        param = variable._ref()
        optimizer = self.optimizer
        group = self._group_of(param) if param is not None else None
        if param is None or group is None:
            return None  # not this optimizer's parameter (any more): the value stays unused
        value = _placed(param, group, _read_state_tensor(position), slot_name)
        optimizer.state[param][slot_name] = value
        node = tensor_node(value, f"{variable._name}/{self._where}/{slot_name}")
        position.mark_restored(node)  # it holds that restore's value already
        return node

    # -- hyperparameters and other non-tensor state, as JSON ----------------------------

    def _checkpoint_tensor_names(self) -> Sequence[str]:
        # The tensors set apart from the JSON are named when it is encoded, at a save; a
        # restore takes every tensor_N the checkpoint holds (see TensorNames).
        return TensorNames([PYTHON_STATE], PYTHON_STATE)

    def _serialize_to_tensors(self) -> dict[str, Any]:
        optimizer = self.optimizer
        names = self._names()
        where = f"optimizer {self._where!r} state"
        groups = []
        state: dict[str, Any] = {}
        for g, group in enumerate(optimizer.param_groups):
            paths = []
            for param in group["params"]:
                path = names.get(id(param))
                if path is None:
                    raise InvalidArgumentError(
                        f"optimizer {self._where!r}: param_groups[{g}] holds a parameter of shape "
                        f"{list(param.shape)} that is in no module of this checkpoint; add the module that owns it "
                        "to the Checkpoint, so that its state can be stored under the parameter's path"
                    )
                paths.append(path)
                other = {k: v for k, v in optimizer.state.get(param, {}).items() if not isinstance(v, torch.Tensor)}
                if other:
                    state[path] = other
            hyper = {k: (v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v) for k, v in group.items()}
            hyper["params"] = paths
            groups.append(hyper)
        # Tensors that are not one per parameter (LBFGS's history lists, a tensor hyperparameter)
        # are stored beside the JSON, which names each by its place: still by parameter path.
        places: list[str] = []
        data, tensors = encode({"param_groups": groups, "state": state}, where, places)
        out: dict[str, Any] = {PYTHON_STATE: data}
        for i, (tensor, place) in enumerate(zip(tensors, places)):
            out[tensor_name(i)] = as_array(tensor, place)
        return out

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> _Restored:
        """Each current group with the hyperparameters it takes; each parameter's extra state."""
        where = f"optimizer {self._where!r}"

        def tensor(index: int) -> torch.Tensor:
            value = tensors.get(tensor_name(index))
            if value is None:
                raise InvalidArgumentError(
                    f"{where}: the stored state names tensor {index}, which the checkpoint does not hold"
                )
            return new_tensor(np.asarray(value))

        group_of, extra = _stored_groups(decode(tensors[PYTHON_STATE], tensor, where), where)
        names = self._names()
        restored = _Restored([], [])
        for group in self.optimizer.param_groups:
            paths = [names.get(id(p)) for p in group["params"]]
            # A group takes the hyperparameters of the stored group its first known parameter was in.
            saved = next((group_of[path] for path in paths if path in group_of), None)
            if saved is not None:
                restored.groups.append((group, {k: v for k, v in saved.items() if k != "params"}))
            for param, path in zip(group["params"], paths):
                values = extra.get(path) if path is not None else None
                if isinstance(values, dict):
                    restored.state.append((param, {k: _placed(param, group, v, k) for k, v in values.items()}))
        return restored

    def _tp_take_restored(self, checked: _Restored) -> None:
        state = self.optimizer.state
        for param, values in checked.state:
            state[param].update(values)
        for target, values in checked.groups:
            for key, value in values.items():
                current = target.get(key)
                if isinstance(current, torch.Tensor) and isinstance(value, torch.Tensor):
                    target[key] = value.to(current.device)  # stored beside the JSON (more than one element)
                elif isinstance(current, torch.Tensor) and current.numel() == 1 and not isinstance(value, (list, dict)):
                    current.fill_(value)  # a tensor learning rate stays a tensor (capturable optimizers)
                elif isinstance(current, tuple) and isinstance(value, list):
                    target[key] = tuple(value)
                else:
                    target[key] = value
