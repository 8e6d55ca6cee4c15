"""Object paths: how TF names a node from the root, and the slot rules of ``rewrite``'s ``drop``.

An *object path* names a node the way its checkpoint keys do: the local names from the root,
each escaped (``.`` → ``..``, ``/`` → ``.S``) and joined by ``/``, e.g. ``model/encoder/w``;
the root is ``""``. A slot variable is named ``<variable>/.OPTIMIZER_SLOT/<optimizer>/<slot>``.

Example:
    >>> split_path("model/x..y/k.S1", "example")
    ['model', 'x.y', 'k/1']
    >>> SlotSpec.parse(".OPTIMIZER_SLOT/m")
    SlotSpec(variable=None, optimizer=None, slot='m')
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._graph.keys import OPTIMIZER_SLOTS, escape_local_name, slot_variable_key, unescape_local_name
from trackpoint.errors import InvalidArgumentError

__all__ = ["SLOT_MARK", "SlotSpec", "mark_values", "split_path", "tf_paths"]

SLOT_MARK = f"/{OPTIMIZER_SLOTS}/"


def split_path(path: str, what: str) -> list[str]:
    """The local names (unescaped) of an object path, or an error naming the bad component."""
    if not isinstance(path, str):
        raise InvalidArgumentError(f"{what}: object path {path!r} is a {type(path).__name__}; pass a str")
    if path == "":
        return []
    names = []
    for part in path.split("/"):
        name = unescape_local_name(part)
        if part == "" or escape_local_name(name) != part:
            raise InvalidArgumentError(
                f"{what}: {path!r} is not an object path: component {part!r} is empty or not escaped as a "
                "checkpoint key escapes it ('.' as '..', '/' as '.S'); write paths as they appear in the keys, "
                "e.g. 'model/dense/kernel'"
            )
        names.append(name)
    return names


def tf_paths(graph: pb.TrackableObjectGraph) -> dict[int, str]:
    """``{node id: object path}`` as TensorFlow names nodes: the first path found breadth first
    along children; then slot variables ``<var>/.OPTIMIZER_SLOT/<optimizer>/<slot>``."""
    paths = {0: ""}
    queue = deque([0])
    count = len(graph.nodes)
    while queue:
        node_id = queue.popleft()
        base = paths[node_id]
        for child in graph.nodes[node_id].children:
            if child.node_id not in paths and 0 <= child.node_id < count:
                name = escape_local_name(child.local_name)
                paths[child.node_id] = f"{base}/{name}" if base or node_id else name
                queue.append(child.node_id)
    tree = dict(paths)
    for node_id, owner in tree.items():
        for slot in graph.nodes[node_id].slot_variables:
            var = tree.get(slot.original_variable_node_id)
            if var is not None and slot.slot_variable_node_id not in paths:
                paths[slot.slot_variable_node_id] = slot_variable_key(var, owner, slot.slot_name)
    return paths


@dataclass(frozen=True)
class SlotSpec:
    """Which slot variables a drop rule names: ``[<var>]/.OPTIMIZER_SLOT/[<optimizer>/]<slot>``.

    Attributes:
        variable: The variable's object path, or None for every variable.
        optimizer: The optimizer's object path, or None for every optimizer.
        slot: The slot name (unescaped), e.g. ``"m"``.
    """

    variable: str | None
    optimizer: str | None
    slot: str

    @staticmethod
    def parse(rule: str) -> SlotSpec | None:
        """The slot rule ``rule`` spells, or None when it is a plain object path."""
        if rule.startswith(f"{OPTIMIZER_SLOTS}/"):
            variable, rest = None, rule[len(OPTIMIZER_SLOTS) + 1 :]
        elif SLOT_MARK in rule:
            variable, rest = rule.split(SLOT_MARK, 1)
        else:
            return None
        optimizer, _, slot = rest.rpartition("/")
        names = split_path(slot, f"drop {rule!r}")
        if len(names) != 1:
            raise InvalidArgumentError(f"drop {rule!r}: name a slot after {OPTIMIZER_SLOTS}/, e.g. '.OPTIMIZER_SLOT/m'")
        return SlotSpec(variable, optimizer or None, names[0])


def mark_values(graph: pb.TrackableObjectGraph) -> None:
    """``has_checkpoint_values`` on every node: true where it or a descendant holds a value."""
    parents: dict[int, list[int]] = {}
    for node_id, node in enumerate(graph.nodes):
        for child in node.children:
            parents.setdefault(child.node_id, []).append(node_id)
    marked = {
        i for i, n in enumerate(graph.nodes) if n.attributes or n.slot_variables or n.HasField("registered_saver")
    }
    queue = deque(marked)
    while queue:
        for parent in parents.get(queue.popleft(), ()):
            if parent not in marked:
                marked.add(parent)
                queue.append(parent)
    for node_id, node in enumerate(graph.nodes):
        node.has_checkpoint_values.value = node_id in marked
