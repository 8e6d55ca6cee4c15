"""The live objects of a checkpoint, breadth first from its root, as TF numbers their nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trackpoint._tracking.base import Trackable
from trackpoint._tracking.variables import Variable

__all__ = ["LiveGraph", "breadth_first", "children_with_attached"]


def children_with_attached(obj: Trackable, root: Trackable, attached: Mapping[str, Trackable]) -> dict[str, Trackable]:
    """``obj``'s children; for the root, followed by the dependencies attached to it
    (``Checkpoint(root, **kwargs)``) that it does not have itself."""
    children = obj._trackable_children()
    if obj is root:
        for name, child in attached.items():
            children.setdefault(name, child)
    return children


@dataclass(frozen=True)
class LiveGraph:
    """Objects reachable from a root, in TF's node order (breadth first, each object once).

    Attributes:
        nodes: The objects; ``nodes[0]`` is the root.
        parents: The index of the object each was first reached from (-1 for the root).
        names: The local name it was first reached by ("" for the root).
        children: Each object's children by local name, as walked.
        ids: ``id(object)`` -> its index.
    """

    nodes: list[Trackable]
    parents: list[int]
    names: list[str]
    children: list[dict[str, Trackable]]
    ids: dict[int, int]


def breadth_first(root: Trackable, attached: Mapping[str, Trackable]) -> LiveGraph:
    """The objects reachable from ``root`` and its attached dependencies (see :class:`LiveGraph`)."""
    nodes = [root]
    parents = [-1]
    names = [""]
    children: list[dict[str, Trackable]] = []
    ids = {id(root): 0}
    for index, obj in enumerate(nodes):  # grows as it goes
        if type(obj) is Variable and obj._tp is None and obj is not root:
            children.append({})  # a plain variable that tracks nothing: no children to ask for
            continue
        kids = children_with_attached(obj, root, attached)
        children.append(kids)
        for name, child in kids.items():
            if id(child) not in ids:
                ids[id(child)] = len(nodes)
                nodes.append(child)
                parents.append(index)
                names.append(name)
    return LiveGraph(nodes, parents, names, children, ids)
