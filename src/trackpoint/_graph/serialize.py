"""Walk live objects into a ``TrackableObjectGraph`` and the ordered tensors of a checkpoint.

Node ids follow TF exactly: breadth-first from the root over children in tracking order
(the root's attached dependencies after its own children), each object named by its
first-discovered path; slot variables get ids after every BFS node. Tensors come in node
order, Python state after them, the graph last; keys carry TF 2.21's double escape of
tensor names.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._graph.keys import OBJECT_GRAPH_KEY, checkpoint_key, escape_local_name, object_path_to_string, \
    slot_variable_key
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.python_state import PythonState
from trackpoint._tracking.variables import Variable

__all__ = ["SerializedCheckpoint", "children_with_attached", "object_paths", "serialize"]


def children_with_attached(obj: Trackable, root: Trackable, attached: Mapping[str, Trackable]) -> dict[str, Trackable]:
    children = obj._trackable_children()
    if obj is root:
        for name, child in attached.items():
            children.setdefault(name, child)
    return children


@dataclass(frozen=True)
class _Walk:
    nodes: list[Trackable]
    paths: list[tuple[str, ...]]
    children: list[dict[str, Trackable]]
    ids: dict[int, int]


def _bfs(root: Trackable, attached: Mapping[str, Trackable]) -> _Walk:
    nodes: list[Trackable] = []
    paths: list[tuple[str, ...]] = []
    children: list[dict[str, Trackable]] = []
    ids: dict[int, int] = {id(root): 0}
    queue: deque[tuple[Trackable, tuple[str, ...]]] = deque([(root, ())])
    while queue:
        obj, path = queue.popleft()
        nodes.append(obj)
        paths.append(path)
        kids = children_with_attached(obj, root, attached)
        children.append(kids)
        for name, child in kids.items():
            if id(child) not in ids:
                ids[id(child)] = len(ids)
                queue.append((child, path + (name,)))
    return _Walk(nodes, paths, children, ids)


def object_paths(root: Trackable, attached: Mapping[str, Trackable] = {}) -> list[tuple[Trackable, tuple[str, ...]]]:
    """Every object reachable from ``root`` with its first-discovered path, in node order."""
    walk = _bfs(root, attached)
    return list(zip(walk.nodes, walk.paths))


@dataclass(frozen=True)
class SerializedCheckpoint:
    """What a save writes: ``tensors`` in write order (the object graph last) and the graph.

    Attributes:
        tensors: ``(checkpoint key, value)`` pairs.
        owners: The object each tensor came from (None for the graph), parallel to ``tensors``.
        graph: The object graph.
    """

    tensors: list[tuple[str, Any]]
    owners: list[Trackable | None]
    graph: pb.TrackableObjectGraph

    def snapshot(self) -> list[tuple[str, Any]]:
        """The tensors frozen at this moment, for a write that happens later.

        ``tp.Variable`` values are never modified in place (assign installs a new array),
        so they are taken as they are, copy-on-write; any other array is copied.
        """
        return [(key, value if isinstance(owner, Variable) or isinstance(value, bytes) else np.array(value, copy=True))
                for (key, value), owner in zip(self.tensors, self.owners)]


def serialize(root: Trackable, attached: Mapping[str, Trackable] = {}) -> SerializedCheckpoint:
    """Build the object graph and the ordered ``(key, value)`` list for a save."""
    walk = _bfs(root, attached)
    graph = pb.TrackableObjectGraph()
    for kids in walk.children:
        node = graph.nodes.add()
        for name, child in kids.items():
            node.children.add(node_id=walk.ids[id(child)], local_name=name)

    objects = list(walk.nodes)
    slot_paths: list[str] = []
    for opt_id, optimizer in enumerate(walk.nodes):
        get_slot_names = getattr(optimizer, "get_slot_names", None)
        if get_slot_names is None:
            continue
        for slot_name in get_slot_names():
            for var_id, variable in enumerate(walk.nodes):
                slot = optimizer.get_slot(variable, slot_name)
                if slot is None:
                    continue
                if id(slot) in walk.ids:
                    raise NotImplementedError(
                        f"slot variable {slot_name!r} of {object_path_to_string(walk.paths[var_id])} is also "
                        "tracked as a regular dependency; TensorFlow cannot checkpoint that either"
                    )
                slot_id = len(objects)
                objects.append(slot)
                graph.nodes.add()
                graph.nodes[opt_id].slot_variables.add(
                    original_variable_node_id=var_id, slot_name=slot_name, slot_variable_node_id=slot_id)
                slot_paths.append(slot_variable_key(object_path_to_string(walk.paths[var_id]),
                                                    object_path_to_string(walk.paths[opt_id]), slot_name))

    path_strings = [object_path_to_string(p) for p in walk.paths] + slot_paths
    tensors: list[tuple[str, Any]] = []
    owners: list[Trackable | None] = []
    python_tensors: list[tuple[str, Any]] = []
    python_owners: list[Trackable | None] = []
    for node_id, obj in enumerate(objects):
        values = obj._serialize_to_tensors()
        full_name = obj._checkpoint_full_name()
        target, target_owners = (python_tensors, python_owners) if isinstance(obj, PythonState) else (tensors, owners)
        for tensor_name, value in values.items():
            attribute_name = escape_local_name(tensor_name)
            # TF 2.21 escapes the already escaped name again when forming the key.
            key = checkpoint_key(path_strings[node_id], attribute_name)
            graph.nodes[node_id].attributes.add(name=attribute_name, full_name=full_name, checkpoint_key=key)
            target.append((key, value))
            target_owners.append(obj)

    for obj in objects:
        after_save = getattr(obj, "_tp_after_save", None)
        if after_save is not None:
            after_save()  # lets grouped objects (split dependencies) check they were saved together
    _mark_checkpoint_values(graph)
    tensors.extend(python_tensors)
    owners.extend(python_owners)
    tensors.append((OBJECT_GRAPH_KEY, graph.SerializeToString()))
    owners.append(None)
    return SerializedCheckpoint(tensors, owners, graph)


def _mark_checkpoint_values(graph: pb.TrackableObjectGraph) -> None:
    """``has_checkpoint_values`` on every node: true for nodes with values and their ancestors."""
    parents: dict[int, list[int]] = {}
    for node_id, node in enumerate(graph.nodes):
        for child in node.children:
            parents.setdefault(child.node_id, []).append(node_id)
    marked: set[int] = set()
    todo = [i for i, n in enumerate(graph.nodes) if n.attributes or n.slot_variables or n.HasField("registered_saver")]
    while todo:
        node_id = todo.pop()
        if node_id in marked:
            continue
        marked.add(node_id)
        todo.extend(parents.get(node_id, ()))
    for node_id, node in enumerate(graph.nodes):
        node.has_checkpoint_values.SetInParent()
        if node_id in marked:
            node.has_checkpoint_values.value = True
