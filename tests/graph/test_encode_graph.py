"""The object graph encoded for all nodes at once is protobuf's encoding of the same message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._graph.encode_graph import GraphColumns
from trackpoint._graph.encode_graph import encode_graph as encode_columns


def encode_graph(references: list, attributes: list, slots: list) -> bytes:
    """The encoder's bytes for a graph given node by node."""
    graph = GraphColumns()
    for refs, tensors, slot_refs in zip(references, attributes, slots):
        graph.child_counts.append(len(refs))
        graph.child_ids.extend(node_id for node_id, _ in refs)
        graph.child_names.extend(name for _, name in refs)
        graph.attribute_counts.append(len(tensors))
        for name, full_name, key in tensors:
            graph.attribute_names.append(name)
            graph.full_names.append(full_name)
            graph.attribute_keys.append(key)
        graph.slot_counts.append(len(slot_refs))
        for variable, slot_name, slot in slot_refs:
            graph.slot_variables.append(variable)
            graph.slot_names.append(slot_name)
            graph.slot_ids.append(slot)
    return encode_columns(graph)


# Strings of every kind the encoder must lay out: empty (left out), non-ASCII (byte and
# character counts differ), and longer than 127 bytes (a two-byte length).
texts = st.one_of(st.just(""), st.text(max_size=8), st.text(min_size=120, max_size=200))
ids = st.one_of(st.just(0), st.integers(0, 127), st.integers(128, 2**31 - 1))


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list, list, list]:
    count = draw(st.integers(1, 12))
    node_ids = st.integers(0, count - 1)
    references = [draw(st.lists(st.tuples(node_ids, texts), max_size=4)) for _ in range(count)]
    attributes = [draw(st.lists(st.tuples(texts, texts, texts), max_size=3)) for _ in range(count)]
    slots = [draw(st.lists(st.tuples(ids, texts, ids), max_size=2)) for _ in range(count)]
    return references, attributes, slots


def _with_protobuf(references: list, attributes: list, slots: list) -> bytes:
    graph = pb.TrackableObjectGraph()
    nodes = [graph.nodes.add() for _ in references]
    for node, refs, tensors, slot_refs in zip(nodes, references, attributes, slots):
        for node_id, name in refs:
            node.children.add(node_id=node_id, local_name=name)
        for name, full_name, key in tensors:
            node.attributes.add(name=name, full_name=full_name, checkpoint_key=key)
        for variable, slot_name, slot in slot_refs:
            node.slot_variables.add(original_variable_node_id=variable, slot_name=slot_name, slot_variable_node_id=slot)
    # has_checkpoint_values: a node holding values or slot references, or any ancestor of one.
    marked = [bool(a or s) for a, s in zip(attributes, slots)]
    changed = True
    while changed:
        changed = False
        for node_id, refs in enumerate(references):
            if not marked[node_id] and any(marked[child] for child, _ in refs):
                marked[node_id] = changed = True
    for node, holds in zip(nodes, marked):
        node.has_checkpoint_values.SetInParent()
        node.has_checkpoint_values.value = holds
    return graph.SerializeToString()


@pytest.mark.slow  # a differential test against protobuf (hypothesis): several seconds
@settings(max_examples=300, deadline=None)
@given(graphs())
def test_encoded_graph_is_protobufs_encoding(graph: tuple[list, list, list]) -> None:
    assert encode_graph(*graph) == _with_protobuf(*graph)


def test_ancestors_marked_through_a_child_with_a_lower_id() -> None:
    # Node 2 reaches the values only through node 1, whose id is lower than its own, and
    # node 1 through node 3: marking must follow edges against the id order too.
    references = [[(2, "b")], [(3, "c")], [(1, "a")], []]
    attributes = [[], [], [], [("VARIABLE_VALUE", "v", "b/a/c/.ATTRIBUTES/VARIABLE_VALUE")]]
    slots: list = [[], [], [], []]
    assert encode_graph(references, attributes, slots) == _with_protobuf(references, attributes, slots)
    parsed = pb.TrackableObjectGraph.FromString(encode_graph(references, attributes, slots))
    assert [n.has_checkpoint_values.value for n in parsed.nodes] == [True, True, True, True]


def test_a_graph_of_many_nodes() -> None:
    count = 3000
    references = [[(i, str(i - 1)) for i in range(1, count)]] + [[] for _ in range(1, count)]
    attributes = [[]] + [[("VARIABLE_VALUE", f"v{i}", f"{i}/.ATTRIBUTES/VARIABLE_VALUE")] for i in range(1, count)]
    slots: list = [[] for _ in range(count)]
    assert encode_graph(references, attributes, slots) == _with_protobuf(references, attributes, slots)
