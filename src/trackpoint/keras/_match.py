"""Which value of a Keras 2 checkpoint each variable of a Keras 3 model takes.

Keras 2 tracked a Sequential or Functional model's layers as ``layer_with_weights-N`` (the N-th
layer that has weights, in ``model.layers`` order) and every other object by the attribute that
holds it: a subclassed model's layers and weights, ``cell`` of an RNN layer, ``_query_dense`` of
``MultiHeadAttention``, ``kernel`` and ``bias`` of a layer. Keras 3 keeps the same attributes
(sometimes with a leading underscore: ``_kernel``), and its layers in the same order, so the
walk pairs the two structures object by object. The one rename: ``DepthwiseConv2D``'s
``depthwise_kernel`` is Keras 3's ``kernel``.

Optimizer state is matched through the variables it belongs to: Keras 2's optimizers (since 2.11)
store it by position (``optimizer/_variables/N``) under names such as ``Adam/m/dense/kernel``, whose
tail is the model variable's full name in the object graph; its legacy optimizers store slot
variables, which the graph ties to their variable's node.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import trackpoint as tp

__all__ = [
    "Matches",
    "layered",
    "match_model",
    "match_optimizer",
    "model_node",
    "optimizer_node",
    "own_variables",
    "renamed_for",
    "sublayers",
]

_LAYERED = "layer_with_weights-"
#: Keras 2's slot names -> Keras 3's (``add_variable_from_reference`` names a slot ``<var path>_<name>``).
_SLOTS = {
    "m": "momentum",
    "v": "velocity",
    "vhat": "velocity_hat",
    "momentum": "momentum",
    "velocity": "velocity",
    "average_gradient": "average_gradient",
    "accumulator": "accumulator",
}
#: Keras 2 attribute names that Keras 3 spells otherwise, by Keras 3 class.
_RENAMED = {"DepthwiseConv1D": {"kernel": "depthwise_kernel"}, "DepthwiseConv2D": {"kernel": "depthwise_kernel"}}


@dataclass
class Matches:
    """What a walk paired: Keras 3 variables with checkpoint nodes, and what it could not pair.

    Attributes:
        pairs: ``(Keras 3 variable, node id)``.
        missing: Paths of Keras 3 variables the checkpoint has nothing for.
        claimed: Node ids paired so far.
    """

    pairs: list[tuple[Any, int]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    claimed: set[int] = field(default_factory=set)

    def pair(self, variable: Any, node_id: int) -> None:
        self.pairs.append((variable, node_id))
        self.claimed.add(node_id)


def model_node(view: tp.CheckpointView) -> int:
    """The model's node: the root's ``model`` (``tf.train.Checkpoint(model=...)``), else the root
    (``model.save_weights``, ``ModelCheckpoint(save_weights_only=True)``)."""
    return view.children(0).get("model", 0)


def optimizer_node(view: tp.CheckpointView, model_id: int) -> int | None:
    """The optimizer's node, beside the model or under it; None when the checkpoint has none."""
    return view.children(0).get("optimizer", view.children(model_id).get("optimizer"))


def match_model(view: tp.CheckpointView, model: Any, node_id: int) -> Matches:
    """Pair every variable of ``model`` with its node below ``node_id``."""
    matches = Matches()
    _walk(view, model, node_id, matches)
    return matches


def layered(obj: Any) -> bool:
    """Whether ``obj`` is a Sequential or Functional model, whose layers Keras 2 numbered."""
    return any(cls.__name__ in ("Sequential", "Functional") for cls in type(obj).__mro__)


def renamed_for(obj: Any) -> dict[str, str]:
    """Keras 3 attribute -> Keras 2 name, where ``obj``'s class spells one otherwise."""
    return _RENAMED.get(type(obj).__name__, {})


def _walk(view: tp.CheckpointView, obj: Any, node_id: int | None, matches: Matches) -> None:
    children = view.children(node_id) if node_id is not None else {}
    if hasattr(obj, "layers") and any(name.startswith(_LAYERED) for name in children):
        for index, layer in enumerate(layer for layer in obj.layers if layer.weights):
            _walk(view, layer, children.get(f"{_LAYERED}{index}"), matches)
        return
    renamed = renamed_for(obj)
    for attribute, variable in own_variables(obj):
        names = [renamed.get(attribute), attribute, variable.name]
        child = next((children[n] for n in names if n is not None and n in children), None)
        if child is None or not view.attributes(child):
            matches.missing.append(variable.path)
        else:
            matches.pair(variable, child)
    for where, layer in sublayers(obj):
        below = _lookup(view, node_id, where) if node_id is not None else None
        if below is None:
            matches.missing.extend(v.path for v in layer.weights)
        else:
            _walk(view, layer, below, matches)


def _lookup(view: tp.CheckpointView, node_id: int, path: list[str]) -> int | None:
    found: int | None = node_id
    for part in path:
        found = view.children(found).get(part) if found is not None else None
    return found


def _fields(obj: Any) -> Iterator[tuple[str, Any]]:
    """``obj``'s attributes, with those the PyTorch backend keeps apart: a Keras 3 layer is a
    ``torch.nn.Module`` there, which holds its sublayers in ``_modules`` rather than ``__dict__``."""
    fields = vars(obj)
    yield from fields.items()
    modules = fields.get("_modules")
    if isinstance(modules, dict):
        yield from modules.items()


def _attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    """``obj``'s attributes, a leading underscore dropped (``_kernel`` is Keras 2's ``kernel``)."""
    for name, value in _fields(obj):
        yield name.lstrip("_") if name.startswith("_") and not name.startswith("__") else name, value


def own_variables(obj: Any) -> list[tuple[str, Any]]:
    """``(attribute, variable)`` for the variables ``obj`` made itself (not its sublayers')."""
    own = [*getattr(obj, "_trainable_variables", []), *getattr(obj, "_non_trainable_variables", [])]
    by_id = {id(value): name for name, value in _attributes(obj) if any(value is v for v in own)}
    return [(by_id.get(id(v), v.name), v) for v in own]


def sublayers(obj: Any) -> list[tuple[list[str], Any]]:
    """``(attribute path, layer)`` of the layers ``obj`` holds directly, in a list too (``blocks/0``)."""
    layer_type = _layer_type(obj)
    found: list[tuple[list[str], Any]] = []
    seen: set[int] = set()
    for name, value in _fields(obj):
        if name in ("_layers", "_tracker", "_inbound_nodes", "_outbound_nodes", "_modules") or name.startswith("__"):
            continue
        items = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for index, item in items:
            if isinstance(item, layer_type) and item is not obj and id(item) not in seen and item.weights:
                seen.add(id(item))
                found.append(([name] if index is None else [name, str(index)], item))
    return found


def _layer_type(obj: Any) -> Any:
    for cls in type(obj).__mro__:
        if cls.__name__ == "Layer" and cls.__module__.startswith("keras"):
            return cls
    return type(None)


def match_optimizer(view: tp.CheckpointView, optimizer: Any, node_id: int | None, model: Matches) -> Matches:
    """Pair the state of a Keras 3 ``optimizer`` (built) with the checkpoint's (``node_id``, None
    when it has none), through the model's pairs."""
    matches = Matches()
    by_node = {node: variable for variable, node in model.pairs}
    graph = view.object_graph
    by_full_name = {a.full_name: variable for node, variable in by_node.items() for a in graph.nodes[node].attributes}
    slots = {v.name: v for v in optimizer.variables}

    def slot_of(variable: Any, name: str) -> Any:
        return slots.get(f"{variable.path.replace('/', '_')}_{_SLOTS.get(name, name)}")

    children = view.children(node_id) if node_id is not None else {}
    iterations = next((children[n] for n in ("_iterations", "iter", "iterations") if n in children), None)
    if iterations is not None:
        matches.pair(optimizer.iterations, iterations)
    refs = graph.nodes[node_id].slot_variables if node_id is not None else []
    for ref in refs:  # a legacy optimizer's slots
        variable = by_node.get(ref.original_variable_node_id)
        slot = slot_of(variable, ref.slot_name) if variable is not None else None
        if slot is not None:
            matches.pair(slot, ref.slot_variable_node_id)
    for child in _values_below(view, children.get("_variables")):
        full_name = graph.nodes[child].attributes[0].full_name
        _, slot_name, rest = (full_name.split("/", 2) + ["", ""])[:3]
        variable = by_full_name.get(rest)
        slot = slot_of(variable, slot_name) if variable is not None else None
        if slot is not None:
            matches.pair(slot, child)
    filled = {id(v) for v, _ in matches.pairs}
    wanted = {id(s): s for v in optimizer._trainable_variables for n in _SLOTS if (s := slot_of(v, n)) is not None}
    matches.missing = [slot.path for key, slot in wanted.items() if key not in filled]
    if iterations is None:
        matches.missing.insert(0, optimizer.iterations.path)
    return matches


def _values_below(view: tp.CheckpointView, node_id: int | None) -> list[int]:
    """The nodes holding values directly below ``node_id`` (a list's items), in order."""
    if node_id is None:
        return []
    return [child for child in view.children(node_id).values() if view.attributes(child)]
