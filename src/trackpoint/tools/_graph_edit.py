"""Editing a checkpoint's object graph by object path: move, drop, add; then renumber it as TF would.

An *object path* names a node the way its checkpoint keys do: the local names from the root,
each escaped (``.`` → ``..``, ``/`` → ``.S``) and joined by ``/``, e.g. ``model/encoder/w``;
the root is ``""``. A slot variable is named by its own path,
``<variable>/.OPTIMIZER_SLOT/<optimizer>/<slot>``.

After the edits, :meth:`GraphEdit.rebuild` lays the graph out as TensorFlow would save the
edited objects: nodes numbered breadth first along children, slot variables after them
(optimizer by optimizer, slot name by slot name, variable by variable), each attribute's
``checkpoint_key`` recomputed from its node's new path and ``has_checkpoint_values`` set on
every node that is or leads to a value.

Examples:
    >>> from trackpoint._format._proto import trackable_object_graph_pb2 as pb
    >>> graph = pb.TrackableObjectGraph()
    >>> root, model, w = graph.nodes.add(), graph.nodes.add(), graph.nodes.add()
    >>> _ = root.children.add(node_id=1, local_name="model"), model.children.add(node_id=2, local_name="w")
    >>> _ = w.attributes.add(name="VARIABLE_VALUE", checkpoint_key="model/w/.ATTRIBUTES/VARIABLE_VALUE")
    >>> edit = GraphEdit(graph, "ckpt")
    >>> edit.move("model/w", "model/encoder/w")
    >>> new_graph, keys = edit.rebuild()
    >>> keys
    {'model/w/.ATTRIBUTES/VARIABLE_VALUE': 'model/encoder/w/.ATTRIBUTES/VARIABLE_VALUE'}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TypeAlias

from trackpoint._io import OPTIMIZER_SLOTS, checkpoint_key, escape_local_name
from trackpoint._io import trackable_object_graph_pb2 as pb
from trackpoint.errors import InvalidArgumentError, NotFoundError
from trackpoint.tools._object_paths import SLOT_MARK, SlotSpec, mark_values, split_path, tf_paths

__all__ = ["GraphEdit"]

_Node: TypeAlias = pb.TrackableObjectGraph.TrackableObject
VALUE = "VARIABLE_VALUE"


class GraphEdit:
    """A mutable copy of an object graph, edited by object path (see the module docstring).

    Args:
        graph: The checkpoint's object graph (not modified).
        prefix: The checkpoint, for error messages.
    """

    def __init__(self, graph: pb.TrackableObjectGraph, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[_Node] = []
        for node in graph.nodes:
            if node.HasField("registered_saver"):
                raise InvalidArgumentError(
                    f"{prefix}: node {len(self.nodes)} uses the registered saver {node.registered_saver.name!r}, "
                    "whose values live in files of their own; trackpoint cannot rewrite such a checkpoint"
                )
            copy = _Node()
            copy.CopyFrom(node)
            self.nodes.append(copy)
        self.old_paths = tf_paths(graph, prefix)
        self.original_count = len(self.nodes)
        self.added: dict[int, str] = {}  # new node id -> its attribute's key placeholder

    # -- finding -----------------------------------------------------------------------

    def _walk(self, names: list[str]) -> int | None:
        node_id = 0
        for name in names:
            found = [c.node_id for c in self.nodes[node_id].children if c.local_name == name]
            if not found:
                return None
            node_id = found[0]
        return node_id

    def reachable(self, start: int) -> set[int]:
        """``start`` and every node below it along children."""
        seen = {start}
        queue = deque([start])
        while queue:
            for child in self.nodes[queue.popleft()].children:
                if child.node_id not in seen:
                    seen.add(child.node_id)
                    queue.append(child.node_id)
        return seen

    def find(self, path: str, what: str) -> int:
        """The node at ``path`` (an object path, or a slot variable's path).

        Raises:
            NotFoundError: Nothing is there; the message lists what the parent holds.
        """
        if SLOT_MARK in path or path.startswith(f"{OPTIMIZER_SLOTS}/"):
            return self._find_slot(path, what)
        names = split_path(path, what)
        node_id = 0
        for depth, name in enumerate(names):
            found = [c.node_id for c in self.nodes[node_id].children if c.local_name == name]
            if not found:
                have = sorted(escape_local_name(c.local_name) for c in self.nodes[node_id].children)
                where = "/".join(map(escape_local_name, names[:depth])) or "the root"
                raise NotFoundError(
                    f"{self.prefix}: {what}: no object {path!r}: {where} has no child {escape_local_name(name)!r} "
                    f"(it has {', '.join(map(repr, have)) or 'no children'}); list the paths with "
                    "`trackpoint tree`",
                    path=self.prefix,
                )
            node_id = found[0]
        return node_id

    def _find_slot(self, path: str, what: str) -> int:
        spec = SlotSpec.parse(path)
        if spec is None or spec.variable is None or spec.optimizer is None:
            raise InvalidArgumentError(
                f"{what}: {path!r}: name one slot as '<variable>/.OPTIMIZER_SLOT/<optimizer>/<slot>'"
            )
        matches = self.slot_refs(spec, what)
        if not matches:
            raise NotFoundError(f"{self.prefix}: {what}: no slot variable {path!r}", path=self.prefix)
        owner, index = matches[0]
        return self.nodes[owner].slot_variables[index].slot_variable_node_id

    def slot_refs(self, spec: SlotSpec, what: str) -> list[tuple[int, int]]:
        """``(optimizer node, index in its slot_variables)`` of every slot reference ``spec`` names."""
        variable = None if spec.variable is None else self.find(spec.variable, what)
        optimizer = None if spec.optimizer is None else self.find(spec.optimizer, what)
        found = []
        for owner, node in enumerate(self.nodes):
            if optimizer is not None and owner != optimizer:
                continue
            for index, ref in enumerate(node.slot_variables):
                if ref.slot_name == spec.slot and variable in (None, ref.original_variable_node_id):
                    found.append((owner, index))
        return found

    # -- editing -----------------------------------------------------------------------

    def _parent_of(self, path: str, what: str) -> tuple[int, str]:
        """``(parent node, local name)`` of an edge ``path`` names, the path itself being in the tree."""
        names = split_path(path, what)
        if not names:
            raise InvalidArgumentError(f"{self.prefix}: {what}: the root cannot be moved, dropped or replaced")
        parent = self.find("/".join(map(escape_local_name, names[:-1])), what)
        return parent, names[-1]

    def _make_parents(self, path: str, what: str) -> tuple[int, str]:
        """``(parent, local name)`` for a new object at ``path``, creating empty parents as needed.

        Raises:
            InvalidArgumentError: Something already is at ``path``, or a parent is a value.
        """
        if SLOT_MARK in path or path.startswith(f"{OPTIMIZER_SLOTS}/"):
            raise InvalidArgumentError(f"{self.prefix}: {what}: {path!r}: slot variables cannot be created by path")
        names = split_path(path, what)
        if not names:
            raise InvalidArgumentError(f"{self.prefix}: {what}: the root already exists")
        if self._walk(names) is not None:
            raise InvalidArgumentError(
                f"{self.prefix}: {what}: {path!r} already exists; drop it first or choose another name",
                path=self.prefix,
            )
        node_id = 0
        for name in names[:-1]:
            child = self._walk_one(node_id, name)
            if child is None:
                child = len(self.nodes)
                self.nodes.append(_Node())
                self.nodes[node_id].children.add(node_id=child, local_name=name)
            elif self.nodes[child].attributes:
                raise InvalidArgumentError(
                    f"{self.prefix}: {what}: {path!r} would put an object under the variable "
                    f"{self.old_paths.get(child, name)!r}; choose a path under a module"
                )
            node_id = child
        return node_id, names[-1]

    def _walk_one(self, node_id: int, name: str) -> int | None:
        for child in self.nodes[node_id].children:
            if child.local_name == name:
                return child.node_id
        return None

    def _movable(self, path: str, what: str) -> int:
        """The node at ``path``, unless it is the root reached again (TF's ``root`` edge of a
        ``Checkpoint(root=...)``): the root stays the root."""
        node_id = self.find(path, what)
        if node_id == 0:
            raise InvalidArgumentError(f"{self.prefix}: {what}: {path!r} is the root itself, which stays in place")
        return node_id

    def move(self, old: str, new: str) -> None:
        """Move the object at ``old`` (and its subtree) to ``new``, creating parents of ``new`` as needed.

        Raises:
            NotFoundError: Nothing is at ``old``.
            InvalidArgumentError: ``new`` exists, or lies inside the moved subtree.
        """
        what = f"rename {old!r} -> {new!r}"
        parent, name = self._parent_of(old, what)
        moved = self._movable(old, what)
        new_names, old_names = split_path(new, what), split_path(old, what)
        if new_names == old_names:
            raise InvalidArgumentError(f"{self.prefix}: {what}: the object is already there; name another path")
        # Inside the subtree by name, or by a shared node that also hangs below it.
        inside = new_names[: len(old_names)] == old_names
        below = self.reachable(moved)
        probe = 0
        for part in new_names[:-1]:
            nxt = self._walk_one(probe, part)
            if nxt is None:
                break
            probe = nxt
            inside = inside or probe in below
        if inside:
            raise InvalidArgumentError(
                f"{self.prefix}: {what}: cannot move an object into its own subtree; move it beside or above itself"
            )
        new_parent, new_name = self._make_parents(new, what)
        children = self.nodes[parent].children
        index = next(i for i, c in enumerate(children) if c.local_name == name)
        if new_parent == parent:  # renamed in place: it keeps its position among its siblings
            children[index].local_name = new_name
            return
        del children[index]
        self.nodes[new_parent].children.add(node_id=moved, local_name=new_name)

    def drop(self, path: str) -> None:
        """Drop the object at ``path`` (every edge to it: it goes with what only it leads to) or slots.

        Raises:
            NotFoundError: Nothing matches ``path``.
        """
        what = f"drop {path!r}"
        spec = SlotSpec.parse(path)
        if spec is not None:
            refs = self.slot_refs(spec, what)
            if not refs:
                raise NotFoundError(
                    f"{self.prefix}: {what}: no slot variable matches; slots present: {self._slot_names()}",
                    path=self.prefix,
                )
            for owner, index in sorted(refs, reverse=True):
                del self.nodes[owner].slot_variables[index]
            return
        self._parent_of(path, what)  # refuses the root
        target = self._movable(path, what)
        for node in self.nodes:
            keep = [c for c in node.children if c.node_id != target]
            if len(keep) != len(node.children):
                del node.children[:]
                node.children.extend(keep)
            slots = [
                s for s in node.slot_variables if target not in (s.original_variable_node_id, s.slot_variable_node_id)
            ]
            if len(slots) != len(node.slot_variables):
                del node.slot_variables[:]
                node.slot_variables.extend(slots)

    def _slot_names(self) -> str:
        names = sorted({s.slot_name for n in self.nodes for s in n.slot_variables})
        return ", ".join(map(repr, names)) or "none"

    def add(self, path: str) -> int:
        """A new variable node at ``path`` (parents created as needed); its node id.

        Raises:
            InvalidArgumentError: ``path`` already exists.
        """
        parent, name = self._make_parents(path, f"add {path!r}")
        node_id = len(self.nodes)
        node = _Node()
        node.attributes.add(name=VALUE, full_name=name)
        self.nodes.append(node)
        self.nodes[parent].children.add(node_id=node_id, local_name=name)
        self.added[node_id] = path
        return node_id

    # -- laying out --------------------------------------------------------------------

    def rebuild(self) -> tuple[pb.TrackableObjectGraph, dict[str, str]]:
        """The edited graph laid out as TF would save it, and ``{old key: new key}`` of every kept value.

        An added variable's old key is ``"\\0add:<path>"`` (no stored key starts with that).
        """
        order, paths = self._layout()
        new_id = {old: new for new, old in enumerate(order)}
        graph = pb.TrackableObjectGraph()
        keys: dict[str, str] = {}
        for old in order:
            source = self.nodes[old]
            node = graph.nodes.add()
            for child in source.children:
                if child.node_id in new_id:
                    node.children.add(node_id=new_id[child.node_id], local_name=child.local_name)
            for ref in source.slot_variables:
                if ref.original_variable_node_id in new_id and ref.slot_variable_node_id in new_id:
                    node.slot_variables.add(
                        original_variable_node_id=new_id[ref.original_variable_node_id],
                        slot_name=ref.slot_name,
                        slot_variable_node_id=new_id[ref.slot_variable_node_id],
                    )
            for attr in source.attributes:
                key = self._new_key(old, attr, paths.get(old))
                copy = node.attributes.add()
                copy.CopyFrom(attr)
                copy.checkpoint_key = key
                keys[attr.checkpoint_key if old not in self.added else f"\0add:{self.added[old]}"] = key
        mark_values(graph)
        return graph, keys

    def _new_key(
        self, old: int, attr: pb.TrackableObjectGraph.TrackableObject.SerializedTensor, path: str | None
    ) -> str:
        if path is None:  # a node no path reached in the source either: left as it was
            return attr.checkpoint_key
        before = self.old_paths.get(old)
        if old not in self.added and before is not None and attr.checkpoint_key.startswith(before + "/"):
            # Replace only the path: the rest is as the writer made it (TF escapes some names twice).
            return path + attr.checkpoint_key[len(before) :]
        return checkpoint_key(path, attr.name)

    def _layout(self) -> tuple[list[int], Mapping[int, str]]:
        """Old node ids in their new order, and the new object path of each (spelled out on lookup)."""
        scratch = pb.TrackableObjectGraph()
        scratch.nodes.extend(self.nodes)
        paths = tf_paths(_tree_only(scratch), self.prefix)
        order = list(paths)  # breadth first, as tf_paths found them
        seen = set(order)
        position = {node: i for i, node in enumerate(order)}
        for owner in list(order):
            refs = [r for r in self.nodes[owner].slot_variables if r.original_variable_node_id in position]
            names = list(dict.fromkeys(r.slot_name for r in refs))
            for name in names:
                for ref in sorted(
                    (r for r in refs if r.slot_name == name), key=lambda r: position[r.original_variable_node_id]
                ):
                    if ref.slot_variable_node_id not in seen:
                        seen.add(ref.slot_variable_node_id)
                        order.append(ref.slot_variable_node_id)
                        paths.add_slot(ref.slot_variable_node_id, ref.original_variable_node_id, owner, name)
        # Nodes the source itself never reached stay (with their keys); edits lose only what they cut off.
        for node_id in range(self.original_count):
            if node_id not in seen and node_id not in self.old_paths:
                order.append(node_id)
        return order, paths


def _tree_only(graph: pb.TrackableObjectGraph) -> pb.TrackableObjectGraph:
    out = pb.TrackableObjectGraph()
    for node in graph.nodes:
        copy = out.nodes.add()
        copy.children.extend(node.children)
    return out
