"""slot_owners: the nodes owning slot variables, found without visiting every node, or None."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackpoint as tp
from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._graph import slot_scan
from trackpoint._graph.slot_scan import slot_owners


def _owners(graph: pb.TrackableObjectGraph) -> list[int]:
    return [i for i, node in enumerate(graph.nodes) if node.slot_variables]


@st.composite
def graphs(draw: st.DrawFn) -> pb.TrackableObjectGraph:
    """Nodes with children, attributes, unknown fields and, on some of them, slot references."""
    count = draw(st.integers(1, 120))
    graph = pb.TrackableObjectGraph()
    for node_id in range(count):
        node = graph.nodes.add()
        for child in draw(st.lists(st.integers(0, count - 1), max_size=3)):
            node.children.add(node_id=child, local_name=f"c{child}")
        if draw(st.booleans()):
            node.attributes.add(name="VARIABLE_VALUE", full_name="v", checkpoint_key=f"k{node_id}/\x1a\x00\n\x00")
        for _ in range(draw(st.sampled_from([0, 0, 0, 1, 3]))):
            node.slot_variables.add(
                original_variable_node_id=draw(st.integers(0, count - 1)),
                slot_name=draw(st.sampled_from(["", "m", "v"])),
                slot_variable_node_id=draw(st.integers(0, count - 1)),
            )
        if draw(st.booleans()):
            node.has_checkpoint_values.value = True
    return graph


@pytest.mark.slow  # 200 random graphs: seconds
@settings(max_examples=200, deadline=None)
@given(graphs(), st.binary(max_size=8))
def test_slot_owners_are_the_nodes_with_slots(graph: pb.TrackableObjectGraph, unknown: bytes) -> None:
    """Whatever else the nodes hold (unknown top-level fields too), the owners found are exactly those with slots."""
    raw = graph.SerializeToString()
    owners = slot_owners(raw, len(graph.nodes))
    expected = _owners(graph)
    if len(expected) <= slot_scan._MAX_OWNERS:
        assert owners == expected
    else:
        assert owners is None
    # An unknown field (number 15, length-delimited) between nodes changes nothing.
    with_unknown = raw + b"\x7a" + bytes([len(unknown)]) + unknown
    assert slot_owners(with_unknown, len(graph.nodes)) == owners


def test_many_owners_leave_the_walk_to_the_caller() -> None:
    graph = pb.TrackableObjectGraph()
    for _ in range(slot_scan._MAX_OWNERS + 1):
        graph.nodes.add().slot_variables.add(slot_name="m")
    assert slot_owners(graph.SerializeToString(), len(graph.nodes)) is None


def test_bytes_that_are_not_a_graph_or_a_wrong_count_give_none() -> None:
    graph = pb.TrackableObjectGraph()
    graph.nodes.add()
    graph.nodes.add().slot_variables.add(slot_name="m")
    raw = graph.SerializeToString()
    assert slot_owners(raw, 2) == [1]
    assert slot_owners(raw, 3) is None
    assert slot_owners(raw[:-1], 2) is None  # truncated: protobuf refuses it
    assert slot_owners(b"\x0a\x00" * 4, 5) is None


def test_a_restore_finds_slots_through_the_scan(tmp_path, monkeypatch) -> None:
    """Slots of an optimizer deep in a large graph are restored; the scan, not a pass over all nodes, found them."""
    prefix = str(tmp_path / "ckpt")
    model = tp.Module()
    model.vars = [tp.Variable(np.full(2, i, np.float32)) for i in range(300)]
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.ones(2, np.float32), v) for v in model.vars])
    tp.Checkpoint(model=model, optimizer=adam).write(prefix)
    expected = [adam.get_slot(v, "m").numpy() for v in model.vars]

    calls = []
    real = slot_scan.slot_owners

    def spy(raw: bytes, count: int) -> list[int] | None:
        calls.append(real(raw, count))
        return calls[-1]

    fresh = tp.Module()
    fresh.vars = [tp.Variable(np.zeros(2, np.float32)) for _ in range(300)]
    fresh_adam = tp.optimizers.Adam(0.1)
    fresh_adam.apply_gradients([(np.zeros(2, np.float32), v) for v in fresh.vars])
    monkeypatch.setattr("trackpoint._graph.restore.slot_owners", spy)
    ckpt = tp.Checkpoint(model=fresh, optimizer=fresh_adam)
    ckpt.read(prefix).assert_consumed()
    assert len(calls) == 1 and calls[0] is not None and len(calls[0]) == 1  # the optimizer's node alone
    for v, m in zip(fresh.vars, expected, strict=False):
        np.testing.assert_array_equal(fresh_adam.get_slot(v, "m").numpy(), m)
    for v in fresh.vars:
        fresh_adam.get_slot(v, "m").assign(np.zeros(2, np.float32))
    ckpt.read(prefix).assert_consumed()  # replayed: the plan knows the owners, no second scan
    assert len(calls) == 1
    for v, m in zip(fresh.vars, expected, strict=False):
        np.testing.assert_array_equal(fresh_adam.get_slot(v, "m").numpy(), m)
