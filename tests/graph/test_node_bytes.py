"""node_bytes: plain variable nodes read from their bytes agree with protobuf's reading of them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackpoint as tp
from trackpoint._format import varint
from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._graph import coordinator, walk
from trackpoint._graph.node_bytes import split_nodes, variable_key

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)


def _plain_variable_key(node: pb.TrackableObjectGraph.TrackableObject) -> str | None:
    """What protobuf says: the key of a node that holds one VARIABLE_VALUE attribute and nothing else."""
    if (
        len(node.attributes) == 1
        and node.attributes[0].name == "VARIABLE_VALUE"
        and not node.children
        and not node.slot_variables
        and not node.HasField("registered_saver")
    ):
        return node.attributes[0].checkpoint_key
    return None


@st.composite
def nodes(draw: st.DrawFn) -> pb.TrackableObjectGraph.TrackableObject:
    """Mostly plain variables (keys and names short and long, ASCII or not), some with more."""
    node = pb.TrackableObjectGraph.TrackableObject()
    for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2]))):
        node.attributes.add(
            name=draw(st.sampled_from(["VARIABLE_VALUE", "VARIABLE_VALUE", "", "VALUE", "x"])),
            full_name=draw(_TEXT),
            checkpoint_key=draw(_TEXT),
        )
    if draw(st.integers(0, 5)) == 0:
        node.children.add(node_id=draw(st.integers(0, 1 << 20)), local_name=draw(_TEXT))
    if draw(st.integers(0, 5)) == 0:
        node.slot_variables.add(original_variable_node_id=1, slot_name="m", slot_variable_node_id=2)
    if draw(st.integers(0, 7)) == 0:
        node.registered_saver.name = "saver"
    if draw(st.booleans()):
        node.has_checkpoint_values.value = draw(st.sampled_from([True, True, False]))
    return node


@pytest.mark.slow  # a differential test against protobuf (hypothesis): about a second
@settings(max_examples=400, deadline=None)
@given(nodes())
def test_a_key_read_from_the_bytes_is_what_protobuf_reads(node: pb.TrackableObjectGraph.TrackableObject) -> None:
    """Plain variables as writers lay them out get their key (lengths past one varint byte
    included); nothing else gets one. A plain variable with an empty key or a false
    ``has_checkpoint_values`` may be left to protobuf (None)."""
    expected = _plain_variable_key(node)
    got = variable_key(node.SerializeToString())
    assert got in (None, expected)
    if expected and node.has_checkpoint_values.value == node.HasField("has_checkpoint_values"):
        assert got == expected


def _field(number: int, payload: bytes) -> bytes:
    return varint.encode(number << 3 | 2) + varint.encode(len(payload)) + payload


def _attribute(*fields: bytes) -> bytes:
    return _field(2, b"".join(fields))


_NAME, _FULL, _KEY = _field(1, b"VARIABLE_VALUE"), _field(2, b"v"), _field(3, b"v/.ATTRIBUTES/VARIABLE_VALUE")


@pytest.mark.parametrize(
    "raw",
    [
        _attribute(_NAME, _FULL, _KEY, _field(3, b"other")),  # a repeated key: protobuf keeps the last
        _attribute(_NAME, _KEY, _FULL),  # another field order
        _attribute(_NAME, _FULL, _KEY) + _attribute(_NAME, _FULL, _KEY),  # two attributes
        _attribute(_NAME, _FULL, _KEY) + _field(15, b"?"),  # an unknown field
        _field(1, b"\x08\x01\x12\x01a") + _attribute(_NAME, _FULL, _KEY),  # a child first
        _attribute(_NAME, _FULL, _KEY, b"\x20\x01"),  # an unknown varint field in the attribute
        _attribute(b"\x0a\x8e\x00VARIABLE_VALUE", _FULL, _KEY),  # an overlong (but valid) varint length
    ],
)
def test_other_layouts_are_left_to_protobuf_or_read_right(raw: bytes) -> None:
    """Bytes in any other layout never give a wrong key: None, or protobuf's own answer."""
    node = pb.TrackableObjectGraph.TrackableObject.FromString(raw)
    assert variable_key(raw) in (None, _plain_variable_key(node))


def test_an_overlong_length_still_reads_the_key() -> None:
    raw = _attribute(_NAME, _FULL, b"\x1a\x81\x00k")
    assert variable_key(raw) == "k" == _plain_variable_key(pb.TrackableObjectGraph.TrackableObject.FromString(raw))


def test_split_nodes_gives_each_node_or_none() -> None:
    graph = pb.TrackableObjectGraph()
    for node_id in range(3):
        graph.nodes.add().attributes.add(name="VARIABLE_VALUE", checkpoint_key=f"k{node_id}")
    raw = graph.SerializeToString()
    assert split_nodes(raw, 3) == [node.SerializeToString() for node in graph.nodes]
    assert split_nodes(raw, 4) is None
    assert split_nodes(raw[:-1], 3) is None


def _model(fill: float, key_chars: int) -> tp.Module:
    # Not helpers.model: 40 plain variable nodes, a key past 127 bytes (a two-byte length) and an int64.
    model = tp.Module()
    model.vars = [tp.Variable(np.full(3, fill + i, np.float32)) for i in range(40)]
    setattr(model, "n" * key_chars, tp.Variable(np.full(2, fill, np.float32)))  # a key past 127 bytes
    model.step = tp.Variable(np.int64(fill))
    return model


def test_a_walk_reading_node_bytes_restores_what_a_walk_through_protobuf_does(tmp_path, monkeypatch) -> None:
    """The same restore, with and without the bytes: the same values and the same account."""
    prefix = tp.Checkpoint(model=_model(1.0, 150)).write(str(tmp_path / "c"))
    seen: list[str | None] = []
    real = walk.variable_keys

    def spy(nodes: list[bytes], ids: list[int]) -> list[str | None]:
        seen.extend(real(nodes, ids))
        return seen[len(seen) - len(ids) :]

    monkeypatch.setattr(walk, "variable_keys", spy)
    with_bytes = _model(0.0, 150)
    report = tp.Checkpoint(model=with_bytes).read(prefix).assert_consumed().report()
    assert len([key for key in seen if key is not None]) == 42  # every variable was read from its bytes
    seen.clear()
    monkeypatch.setattr(coordinator, "split_nodes", lambda raw, count: None)
    through_protobuf = _model(0.0, 150)
    assert tp.Checkpoint(model=through_protobuf).read(prefix).assert_consumed().report() == report
    assert not [key for key in seen if key is not None]
    for a, b in zip(with_bytes.trainable_variables, through_protobuf.trainable_variables, strict=False):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(with_bytes.vars[39].numpy(), np.full(3, 40.0, np.float32))
    assert getattr(with_bytes, "n" * 150).numpy().tolist() == [1.0, 1.0]
