"""A checkpoint's object graph: parsing it, checking its references and naming its nodes."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph.keys import OBJECT_GRAPH_KEY, unescape_local_name
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = [
    "check_child",
    "check_slot",
    "first_parents",
    "has_values",
    "node_paths",
    "parse_graph",
    "read_object_graph",
    "read_object_graph_bytes",
    "tree_paths",
    "unescape",
]

_MAX_NODES = 1 << 24
_MAX_PATH_CHARS = 512


def parse_graph(raw: bytes, prefix: str, validate: bool = True) -> pb.TrackableObjectGraph:
    """Parse a serialized object graph; with ``validate``, check every node reference up front.

    A restore passes ``validate=False``: its coordinator checks each reference as it follows
    it, which saves a pass over every node of a large graph.
    """
    graph = pb.TrackableObjectGraph()
    try:
        graph.ParseFromString(raw)
    except DecodeError as exc:
        raise DataLossError(f"{prefix}: the object graph is not a valid TrackableObjectGraph: {exc}") from exc
    count = len(graph.nodes)
    if count == 0 or count > _MAX_NODES:
        raise DataLossError(f"{prefix}: the object graph has {count} nodes")
    if validate:
        for node_id, node in enumerate(graph.nodes):
            for child in node.children:
                check_child(child.node_id, count, node_id, prefix)
            for slot in node.slot_variables:
                check_slot(slot, count, node_id, prefix)
    return graph


def read_object_graph_bytes(reader: BundleReader) -> bytes | None:
    """The checkpoint's serialized object graph; None if it has none.

    Raises:
        InvalidArgumentError: The graph key holds something other than a scalar string.
    """
    if OBJECT_GRAPH_KEY not in reader:
        return None
    raw = reader.read(OBJECT_GRAPH_KEY)
    if not isinstance(raw, bytes):
        raise InvalidArgumentError(f"{reader.prefix}: {OBJECT_GRAPH_KEY} is not a scalar string")
    return raw


def read_object_graph(reader: BundleReader, validate: bool = True) -> pb.TrackableObjectGraph | None:
    """The checkpoint's object graph, parsed (see :func:`parse_graph`); None if it has none.

    Raises:
        InvalidArgumentError: The graph key holds something other than a scalar string.
        DataLossError: The graph is malformed.
    """
    raw = read_object_graph_bytes(reader)
    return None if raw is None else parse_graph(raw, reader.prefix, validate)


def check_child(child_id: int, count: int, node_id: int, prefix: str) -> None:
    """Raise ``DataLossError`` unless ``child_id`` lies inside a graph of ``count`` nodes."""
    if not 0 <= child_id < count:
        raise DataLossError(f"{prefix}: node {node_id} names child node {child_id} of {count}")


def check_slot(
    slot: pb.TrackableObjectGraph.TrackableObject.SlotVariableReference, count: int, node_id: int, prefix: str
) -> None:
    """Raise ``DataLossError`` unless both nodes of a slot reference lie inside the graph."""
    if not (0 <= slot.original_variable_node_id < count and 0 <= slot.slot_variable_node_id < count):
        raise DataLossError(f"{prefix}: node {node_id} has a slot reference outside the graph")


def first_parents(graph: pb.TrackableObjectGraph) -> dict[int, tuple[int, str]]:
    """``{node id: (parent id, local name)}`` of every node reachable along children from the root,
    by the first edge found breadth first (the one TF names a node by), in the order found; the
    root itself is not in it. Children outside the graph are left out."""
    parents: dict[int, tuple[int, str]] = {}
    count = len(graph.nodes)
    order = [0]
    for node_id in order:  # grows as it goes: breadth first
        for child in graph.nodes[node_id].children:
            child_id = child.node_id
            if child_id != 0 and child_id not in parents and 0 <= child_id < count:
                parents[child_id] = (node_id, child.local_name)
                order.append(child_id)
    return parents


def tree_paths(graph: pb.TrackableObjectGraph, root: str) -> dict[int, str]:
    """``{node id: root.a.b}`` for the nodes reachable along children, along the first path found breadth
    first. A path longer than 512 characters is shortened in the middle: a hostile 50,000-deep chain would
    otherwise cost quadratic memory (gigabytes of path strings)."""
    paths = {0: root}
    for node_id, (parent_id, local_name) in first_parents(graph).items():  # a parent before its children
        parent = paths[parent_id]
        if len(parent) > _MAX_PATH_CHARS:
            parent = parent[: _MAX_PATH_CHARS // 2] + "..."
        paths[node_id] = f"{parent}.{local_name[:_MAX_PATH_CHARS]}"
    return paths


def node_paths(graph: pb.TrackableObjectGraph) -> dict[int, str]:
    """Readable paths ``(root).model.dense.kernel``; slots as ``<opt>'s state 'm' for <var>``."""
    paths = tree_paths(graph, "(root)")
    count = len(graph.nodes)
    for node_id, node in enumerate(graph.nodes):
        for slot in node.slot_variables:
            if slot.slot_variable_node_id not in paths and 0 <= slot.slot_variable_node_id < count:
                paths[slot.slot_variable_node_id] = (
                    f"{paths.get(node_id, f'node {node_id}')}'s state '{slot.slot_name}' for "
                    f"{paths.get(slot.original_variable_node_id, f'node {slot.original_variable_node_id}')}"
                )
    for node_id in range(len(graph.nodes)):
        paths.setdefault(node_id, f"(unreachable node {node_id})")
    return paths


def has_values(node: pb.TrackableObjectGraph.TrackableObject) -> bool:
    """Whether a node or its descendants hold values (``has_checkpoint_values``, or what TF infers without it)."""
    if node.HasField("has_checkpoint_values"):
        return node.has_checkpoint_values.value
    return bool(node.children or node.attributes or node.slot_variables or node.HasField("registered_saver"))


_NAMES: dict[str, str] = {}  # stored attribute name -> name; there are only a handful ("VARIABLE_VALUE", ...)


def unescape(name: str) -> str:
    """An attribute's tensor name from its stored (escaped) name."""
    unescaped = _NAMES.get(name)
    if unescaped is None:
        unescaped = unescape_local_name(name)
        if len(_NAMES) < 4096:
            _NAMES[name] = unescaped
    return unescaped
