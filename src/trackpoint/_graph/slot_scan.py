"""Finding the nodes of a serialized object graph that own slot variables, without visiting every node.

A restore must know every slot reference before it walks (a variable may be reached before
its optimizer), and only optimizers own them: a handful of nodes in a graph of tens of
thousands. Asking each parsed node for its slot variables costs a wrapper per node (PERFORMANCE.md). Here
protobuf parses the graph again through a schema that knows nothing but the slot field
(``_proto/slot_scan.proto``), drops everything else and serializes what is left: two bytes
per node without slots, so numpy finds the few others.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from trackpoint._format import varint
from trackpoint._format._proto.slot_scan_pb2 import SlotsOnlyGraph
from trackpoint._format.wire import GRAPH_NODE
from trackpoint.errors import DataLossError

__all__ = ["slot_owners"]

_MAX_OWNERS = 64  # beyond this many, visiting every node is as cheap: the caller does
_EMPTY_NODE = (GRAPH_NODE, 0)  # a node of length 0


def slot_owners(raw: bytes, node_count: int) -> list[int] | None:
    """Ids of the nodes with slot variables, in order; None when the caller should look at every node.

    None means: too many owners for this to pay, or bytes this scan does not follow (the
    caller's own parse of them has already succeeded or will word the error).

    Examples:
        >>> from trackpoint._format._proto import trackable_object_graph_pb2 as pb
        >>> graph = pb.TrackableObjectGraph()
        >>> for _ in range(4):
        ...     _ = graph.nodes.add()
        >>> _ = graph.nodes[2].slot_variables.add(original_variable_node_id=1, slot_name="m", slot_variable_node_id=3)
        >>> slot_owners(graph.SerializeToString(), 4)
        [2]
    """
    message = SlotsOnlyGraph()
    try:
        message.ParseFromString(raw)
    except DecodeError:
        return None
    message.DiscardUnknownFields()
    data = message.SerializeToString()
    if len(data) == 2 * node_count:  # nothing but empty nodes: no slots anywhere
        return [] if len(message.nodes) == node_count else None
    view = np.frombuffer(data, np.uint8)
    owners: list[int] = []
    node = pos = 0
    while pos < len(data):
        # Skip the empty nodes up to the next one that has slots.
        pairs = view[pos : pos + (len(data) - pos) // 2 * 2].reshape(-1, 2)
        others = np.flatnonzero((pairs[:, 0] != _EMPTY_NODE[0]) | (pairs[:, 1] != _EMPTY_NODE[1]))
        skip = int(others[0]) if len(others) else len(pairs)
        node += skip
        pos += 2 * skip
        if pos >= len(data):
            break
        if data[pos] != _EMPTY_NODE[0] or len(owners) == _MAX_OWNERS:
            return None
        try:
            length, pos = varint.decode(data, pos + 1, "slot scan", 5)
        except DataLossError:
            return None
        owners.append(node)
        node += 1
        pos += length
    return owners if node == node_count and pos == len(data) else None
