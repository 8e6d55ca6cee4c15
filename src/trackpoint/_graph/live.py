"""The live objects of a checkpoint, breadth first from its root, as TF numbers their nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from trackpoint._tracking.base import Trackable
from trackpoint._tracking.dict_wrapper import DictWrapper
from trackpoint._tracking.list_wrapper import ListWrapper
from trackpoint._tracking.tuple_wrapper import TupleWrapper

__all__ = [
    "PLAIN_CHILDREN",
    "LiveGraph",
    "ask_containers",
    "breadth_first",
    "by_id",
    "children_with_attached",
    "is_leaf",
    "tracked_children",
]

#: Trackable's own ``_trackable_children``: a class that has it reads its children from its state.
PLAIN_CHILDREN = Trackable._trackable_children
_NO_CHILDREN: Mapping[str, Trackable] = MappingProxyType({})
_STATE_CHILDREN = frozenset(
    cls._trackable_children for cls in (Trackable, ListWrapper, DictWrapper, TupleWrapper)
)  # see tracked_children


def children_with_attached(
    obj: Trackable, root: Trackable, attached: Mapping[str, Trackable]
) -> Mapping[str, Trackable]:
    """``obj``'s children, to read and not to keep; for the root, followed by the dependencies
    attached to it (``Checkpoint(root, **kwargs)``) that it does not have itself.

    An object whose class tracks children as ``Trackable`` does is read in place rather
    than through ``_trackable_children``, which copies them: this runs once per object of
    a walk, and most objects are leaves (variables) with none.
    """
    if obj is root:
        children = obj._trackable_children()
        for name, child in attached.items():
            children.setdefault(name, child)
        return children
    if type(obj)._trackable_children is PLAIN_CHILDREN:
        state = obj._tp
        return state["children"] if state is not None else _NO_CHILDREN
    return obj._trackable_children()


def tracked_children(obj: Trackable) -> Mapping[str, Trackable] | None:
    """``obj``'s children as its state tracks them, to read and not to keep, without asking it;
    None for a class that computes its own.

    For ``Trackable`` and the container wrappers these are exactly its children: a wrapper's
    ``_trackable_children`` only checks first that it can be saved (and raises if not), which
    a restore's walk must not do.
    """
    if type(obj)._trackable_children not in _STATE_CHILDREN:
        return None
    state = obj._tp
    return state["children"] if state is not None else _NO_CHILDREN


def ask_containers(objects: Sequence[Trackable]) -> None:
    """Ask each of ``objects`` whose class computes its children (the container wrappers) for
    them, as a walk of the live objects does: a wrapper raises when it cannot be saved, and
    notices changes made behind its back (which moves the structure epoch)."""
    for obj in objects:
        if type(obj)._trackable_children is not PLAIN_CHILDREN:
            obj._trackable_children()


def is_leaf(obj: Trackable) -> bool:
    """Whether ``obj`` is of a plain class and has no children, known without asking for them
    (most objects of a walk are such leaves: variables)."""
    return obj._tp is None and type(obj)._trackable_children is PLAIN_CHILDREN


def by_id(root: Trackable, attached: Mapping[str, Trackable]) -> dict[int, Trackable]:
    """Every object reachable from ``root`` and its attached dependencies, by ``id()``: what
    :func:`breadth_first` finds, without the paths and the children's copies (a check's fast path)."""
    live = {id(root): root}
    objects = [root]
    for obj in objects:  # grows as it goes: breadth first
        if obj is not root and is_leaf(obj):
            continue
        for child in children_with_attached(obj, root, attached).values():
            key = id(child)
            if key not in live:
                live[key] = child
                objects.append(child)
    return live


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
    children: list[Mapping[str, Trackable]]
    ids: dict[int, int]


def breadth_first(root: Trackable, attached: Mapping[str, Trackable]) -> LiveGraph:
    """The objects reachable from ``root`` and its attached dependencies (see :class:`LiveGraph`)."""
    nodes = [root]
    parents = [-1]
    names = [""]
    children: list[Mapping[str, Trackable]] = []
    ids = {id(root): 0}
    for index, obj in enumerate(nodes):  # grows as it goes
        if obj is not root and is_leaf(obj):
            children.append(_NO_CHILDREN)
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
