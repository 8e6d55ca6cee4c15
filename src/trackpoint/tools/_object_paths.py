"""Object paths: how TF names a node from the root, and the slot rules of ``rewrite``'s ``drop``.

An *object path* names a node the way its checkpoint keys do: the local names from the root,
each escaped (``.`` → ``..``, ``/`` → ``.S``) and joined by ``/``, e.g. ``model/encoder/w``;
the root is ``""``. A slot variable is named ``<variable>/.OPTIMIZER_SLOT/<optimizer>/<slot>``.

Examples:
    >>> split_path("model/x..y/k.S1", "example")
    ['model', 'x.y', 'k/1']
    >>> SlotSpec.parse(".OPTIMIZER_SLOT/m")
    SlotSpec(variable=None, optimizer=None, slot='m')
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from trackpoint._io import OPTIMIZER_SLOTS, escape_local_name, first_parents, slot_variable_key, unescape_local_name
from trackpoint._io import trackable_object_graph_pb2 as pb
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = ["MAX_PATH_CHARS", "SLOT_MARK", "ObjectPaths", "SlotSpec", "mark_values", "split_path", "tf_paths"]

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


class ObjectPaths(Mapping[int, str]):
    """``{node id: object path}`` built lazily from parent pointers (see :func:`tf_paths`).

    Iteration is in the order the nodes were found (breadth first, then slot variables). A path
    is only spelled out when it is looked up, and kept: the rewrite needs the paths of the nodes
    that hold values, not of every node, and building every path of a hostile 50,000-deep chain
    up front costs quadratic memory (gigabytes). What is spelled out is also bounded in total
    (:data:`MAX_PATH_CHARS` beyond twice the source's own keys): a chain whose every node holds a
    value under a short key would otherwise still need quadratic characters of new keys.

    Args:
        prefix: The checkpoint, for the error message.
        budget: The characters of paths that may be spelled out, in total.
    """

    def __init__(self, prefix: str, budget: int) -> None:
        self.prefix = prefix
        self._budget = budget
        self._spent = 0
        # node id -> (parent id, escaped local name) for tree nodes (the root: (-1, "")), or
        # (variable id, optimizer id, slot name) for slot variables.
        self._tree: dict[int, tuple[int, str]] = {0: (-1, "")}
        self._slots: dict[int, tuple[int, int, str]] = {}
        self._spelled: dict[int, str] = {0: ""}

    def add_child(self, node_id: int, parent: int, escaped_name: str) -> None:
        """Record a tree node below ``parent`` (already recorded)."""
        self._tree[node_id] = (parent, escaped_name)

    def add_slot(self, node_id: int, variable: int, optimizer: int, slot_name: str) -> None:
        """Record a slot variable of ``variable`` (a tree node) kept by ``optimizer``."""
        self._slots[node_id] = (variable, optimizer, slot_name)

    def in_tree(self, node_id: int) -> bool:
        """Whether ``node_id`` was reached along children (not only as a slot variable)."""
        return node_id in self._tree

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._tree or node_id in self._slots

    def __iter__(self) -> Iterator[int]:
        yield from self._tree
        yield from self._slots

    def __len__(self) -> int:
        return len(self._tree) + len(self._slots)

    def __getitem__(self, node_id: int) -> str:
        path = self._spelled.get(node_id)
        if path is not None:
            return path
        if node_id in self._slots:
            variable, optimizer, slot_name = self._slots[node_id]
            path = slot_variable_key(self[variable], self[optimizer], slot_name)
        else:
            names = []
            # Up to the nearest ancestor already spelled out (the root at the latest): no recursion.
            ancestor = node_id
            while ancestor not in self._spelled:
                ancestor, name = self._tree[ancestor]  # KeyError for an unknown node, as a dict
                names.append(name)
            tail = "/".join(reversed(names))
            path = f"{self._spelled[ancestor]}/{tail}" if ancestor != 0 else tail
        self._spent += len(path)
        if self._spent > self._budget:
            raise DataLossError(
                f"{self.prefix}: the object graph nests objects so deep that their paths (node {node_id}'s is "
                f"{len(path)} characters) would need more than {self._budget} characters of checkpoint keys; "
                "it is damaged or hostile (`trackpoint verify` it); a checkpoint TensorFlow wrote never nests "
                "this deep",
                path=self.prefix,
            )
        self._spelled[node_id] = path
        return path


MAX_PATH_CHARS = 32 << 20
"""Characters of object paths a rewrite may spell out beyond twice the source's own keys."""


def tf_paths(graph: pb.TrackableObjectGraph, prefix: str = "checkpoint") -> ObjectPaths:
    """``{node id: object path}`` as TensorFlow names nodes: the first path found breadth first
    along children; then slot variables ``<var>/.OPTIMIZER_SLOT/<optimizer>/<slot>``.

    The mapping spells a path out only when it is looked up (see :class:`ObjectPaths`): memory
    is linear in the graph's size however deep it nests.

    Examples:
        >>> graph = pb.TrackableObjectGraph()
        >>> root, model, w = graph.nodes.add(), graph.nodes.add(), graph.nodes.add()
        >>> _ = root.children.add(node_id=1, local_name="model"), model.children.add(node_id=2, local_name="a/b")
        >>> dict(tf_paths(graph))
        {0: '', 1: 'model', 2: 'model/a.Sb'}
    """
    own_keys = sum(len(a.checkpoint_key) for node in graph.nodes for a in node.attributes)
    paths = ObjectPaths(prefix, MAX_PATH_CHARS + 2 * own_keys)
    for node_id, (parent_id, local_name) in first_parents(graph).items():
        paths.add_child(node_id, parent_id, escape_local_name(local_name))
    for node_id in list(paths):
        for slot in graph.nodes[node_id].slot_variables:
            if paths.in_tree(slot.original_variable_node_id) and slot.slot_variable_node_id not in paths:
                paths.add_slot(slot.slot_variable_node_id, slot.original_variable_node_id, node_id, slot.slot_name)
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
