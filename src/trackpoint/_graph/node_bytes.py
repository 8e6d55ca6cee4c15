"""Reading the plain variables of a serialized object graph from each node's bytes.

Most nodes of a large model's graph are plain variables: one attribute named
``VARIABLE_VALUE`` and nothing else. Asking protobuf's message objects for such a node's
key builds a wrapper for the node, for its attribute list, for the attribute, then its
strings; a few byte comparisons on the node's bytes cost a fraction of that (PERFORMANCE.md).
Protobuf still does the splitting, in C, through a schema that keeps each node as bytes
(``_proto/node_bytes.proto``), and the restore has parsed the same graph with the full schema
first, so the bytes are known to be well formed.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from trackpoint._format import varint
from trackpoint._format._proto.node_bytes_pb2 import GraphOfNodeBytes
from trackpoint._format.wire import ATTRIBUTE_FULL_NAME, ATTRIBUTE_KEY, ATTRIBUTE_NAME, NODE_ATTRIBUTE, NODE_HAS_VALUES
from trackpoint.errors import DataLossError

__all__ = ["HAS_VALUES_FIELD", "split_nodes", "variable_key", "variable_keys"]

_NAME_FIELD = bytes((ATTRIBUTE_NAME, 14)) + b"VARIABLE_VALUE"  # the attribute's name, 14 characters
#: A node's ``has_checkpoint_values``: ``BoolValue(true)`` (its field 1 set), as every writer encodes it.
HAS_VALUES_FIELD = bytes((NODE_HAS_VALUES, 2, 0x08, 1))


def split_nodes(raw: bytes, node_count: int) -> list[bytes] | None:
    """The serialized bytes of each node of a serialized ``TrackableObjectGraph``, in order.

    None if protobuf cannot split them or finds other than ``node_count`` nodes (the
    caller's own parse of the graph words the error).

    Examples:
        >>> from trackpoint._format._proto import trackable_object_graph_pb2 as pb
        >>> graph = pb.TrackableObjectGraph()
        >>> _ = graph.nodes.add().children.add(node_id=1, local_name="v")
        >>> _ = graph.nodes.add()
        >>> split_nodes(graph.SerializeToString(), 2)
        [b'\\n\\x05\\x08\\x01\\x12\\x01v', b'']
    """
    message = GraphOfNodeBytes()
    try:
        message.ParseFromString(raw)
    except DecodeError:
        return None
    nodes = list(message.nodes)
    return nodes if len(nodes) == node_count else None


def variable_key(node: bytes) -> str | None:
    """The checkpoint key of a node that is exactly a plain variable; None for any other node.

    Such a node is its one attribute ``{name: "VARIABLE_VALUE", full_name (optional),
    checkpoint_key}``, fields in that order, optionally followed by
    ``has_checkpoint_values: true``: what TensorFlow and trackpoint write for a variable.
    Children, slot variables, other attributes, unknown fields or another order all give
    None, and the caller reads that node through protobuf, so a None is never wrong, only slower.

    Examples:
        >>> from trackpoint._format._proto import trackable_object_graph_pb2 as pb
        >>> node = pb.TrackableObjectGraph.TrackableObject()
        >>> _ = node.attributes.add(name="VARIABLE_VALUE", full_name="v", checkpoint_key="v/.ATTRIBUTES/VARIABLE_VALUE")
        >>> variable_key(node.SerializeToString())
        'v/.ATTRIBUTES/VARIABLE_VALUE'
        >>> _ = node.children.add(node_id=2, local_name="w")
        >>> variable_key(node.SerializeToString()) is None
        True
    """
    # Slices compared rather than endswith/startswith: no method lookups (see PERFORMANCE.md).
    end = len(node) - 4 if node[-4:] == HAS_VALUES_FIELD else len(node)
    # The usual layout, every length one byte (below 0x80, which end < 0x82 ensures):
    # 12 L | 0A 0E VARIABLE_VALUE | 12 F full name | 1A K key
    if 20 < end < 0x82 and node[1] == end - 2 and node[0] == NODE_ATTRIBUTE and node[2:18] == _NAME_FIELD:
        start = 22 + node[19]  # of the key
        if (
            start <= end
            and node[18] == ATTRIBUTE_FULL_NAME
            and node[start - 2] == ATTRIBUTE_KEY
            and node[start - 1] == end - start
        ):
            return node[start:end].decode()
    return _variable_key_any_lengths(node, end)


def variable_keys(nodes: list[bytes], ids: list[int]) -> list[str | None]:
    """:func:`variable_key` of ``nodes[i]`` for each of ``ids`` (which the caller has checked)."""
    return [variable_key(nodes[node_id]) for node_id in ids]


def _variable_key_any_lengths(node: bytes, end: int) -> str | None:
    """:func:`variable_key` for any varint lengths and with or without a full name."""
    try:
        if not node or node[0] != NODE_ATTRIBUTE:
            return None
        size, pos = varint.decode(node, 1, "attribute", 5)
        if pos + size != end or not node.startswith(_NAME_FIELD, pos):
            return None
        pos += len(_NAME_FIELD)
        if node[pos] == ATTRIBUTE_FULL_NAME:  # unused here
            size, pos = varint.decode(node, pos + 1, "full name", 5)
            pos += size
        if node[pos] != ATTRIBUTE_KEY:
            return None
        size, pos = varint.decode(node, pos + 1, "checkpoint key", 5)
    except (DataLossError, IndexError):
        return None
    return node[pos:end].decode() if pos + size == end else None
