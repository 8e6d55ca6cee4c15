"""The ``TrackableObjectGraph`` message of a save, encoded for all nodes at once.

A save of many variables has one node per variable; encoding them one message at a time
was most of a first save's Python time. Here each field is a column over all nodes (or
over all references, attributes and slot references): the lengths are computed first,
bottom up, then every field is written for all records at once into one buffer
(:mod:`trackpoint._format.ragged`). The bytes are protobuf's own encoding of the same
message, which the tests check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trackpoint._format import wire
from trackpoint._format.ragged import (
    Strings,
    exclusive_cumsum,
    group_sums,
    put_bytes,
    put_strings,
    put_varints,
    record_starts,
    varint_sizes,
)
from trackpoint._graph.node_bytes import HAS_VALUES_FIELD

__all__ = ["GraphColumns", "encode_graph"]

_NO_VALUES_FIELD = bytes((wire.NODE_HAS_VALUES, 0))  # has_checkpoint_values: BoolValue() present but empty


class _IntField:
    """A varint field of every record, absent where 0 (proto3 leaves defaults out)."""

    def __init__(self, tag: int, values: Sequence[int]) -> None:
        self.tag = tag
        self.values = np.fromiter(values, np.int64, len(values))
        self.sizes = np.where(self.values != 0, 1 + varint_sizes(self.values), 0)

    def put(self, out: np.ndarray, at: np.ndarray) -> None:
        present = self.values != 0
        out[at[present]] = self.tag
        put_varints(out, at[present] + 1, self.values[present])


class _StringField:
    """A string field of every record, absent where empty."""

    def __init__(self, tag: int, values: Sequence[str]) -> None:
        self.tag = tag
        self.strings = Strings.of(values)
        lengths = self.strings.lengths
        self.prefix = 1 + varint_sizes(lengths)
        self.sizes = np.where(lengths != 0, self.prefix + lengths, 0)

    def put(self, out: np.ndarray, at: np.ndarray) -> None:
        present = self.strings.lengths != 0
        out[at[present]] = self.tag
        put_varints(out, at[present] + 1, self.strings.lengths[present])
        put_strings(out, at + self.prefix, self.strings)


@dataclass
class _Records:
    """The records of one repeated sub-message field of the nodes (their children, say)."""

    tag: int
    fields: list[_IntField | _StringField]
    counts: np.ndarray  # records per node

    def __post_init__(self) -> None:
        self.payloads = sum((f.sizes for f in self.fields), np.zeros(int(self.counts.sum()), np.int64))
        self.heads = 1 + varint_sizes(self.payloads)
        self.sizes = self.heads + self.payloads
        self.per_node = group_sums(self.sizes, self.counts)

    def put(self, out: np.ndarray, bases: np.ndarray) -> None:
        at = record_starts(bases, self.sizes, self.counts)
        out[at] = self.tag
        put_varints(out, at + 1, self.payloads)
        at = at + self.heads
        for column in self.fields:
            column.put(out, at)
            at = at + column.sizes


@dataclass
class GraphColumns:
    """A save's object graph as columns: each kind of record flat over all nodes, in node
    order, with how many each node has.

    Attributes:
        child_counts, child_ids, child_names: Children (``ObjectReference``).
        attribute_counts, attribute_names, full_names, attribute_keys: Tensors (``SerializedTensor``).
        slot_counts, slot_variables, slot_names, slot_ids: Slot variables an optimizer owns
            (``SlotVariableReference``: the variable's node, the slot's name, the slot's node).
    """

    child_counts: list[int] = field(default_factory=list)
    child_ids: list[int] = field(default_factory=list)
    child_names: list[str] = field(default_factory=list)
    attribute_counts: list[int] = field(default_factory=list)
    attribute_names: list[str] = field(default_factory=list)
    full_names: list[str] = field(default_factory=list)
    attribute_keys: list[str] = field(default_factory=list)
    slot_counts: list[int] = field(default_factory=list)
    slot_variables: list[int] = field(default_factory=list)
    slot_names: list[str] = field(default_factory=list)
    slot_ids: list[int] = field(default_factory=list)


def encode_graph(graph: GraphColumns) -> bytes:
    """The serialized ``TrackableObjectGraph``."""

    def counts(values: list[int]) -> np.ndarray:
        return np.fromiter(values, np.int64, len(values))

    children = _Records(
        wire.NODE_CHILD,
        [_IntField(wire.REFERENCE_NODE_ID, graph.child_ids), _StringField(wire.REFERENCE_NAME, graph.child_names)],
        counts(graph.child_counts),
    )
    tensors = _Records(
        wire.NODE_ATTRIBUTE,
        [
            _StringField(wire.ATTRIBUTE_NAME, graph.attribute_names),
            _StringField(wire.ATTRIBUTE_FULL_NAME, graph.full_names),
            _StringField(wire.ATTRIBUTE_KEY, graph.attribute_keys),
        ],
        counts(graph.attribute_counts),
    )
    slot_refs = _Records(
        wire.NODE_SLOT,
        [
            _IntField(wire.SLOT_ORIGINAL_ID, graph.slot_variables),
            _StringField(wire.SLOT_NAME, graph.slot_names),
            _IntField(wire.SLOT_NODE_ID, graph.slot_ids),
        ],
        counts(graph.slot_counts),
    )
    marked = np.array(_checkpoint_values(graph), bool)
    values_sizes = np.where(marked, len(HAS_VALUES_FIELD), len(_NO_VALUES_FIELD))
    payloads = children.per_node + tensors.per_node + slot_refs.per_node + values_sizes
    heads = 1 + varint_sizes(payloads)
    starts = exclusive_cumsum(heads + payloads)
    out = np.empty(int((heads + payloads).sum()), np.uint8)
    out[starts] = wire.GRAPH_NODE
    put_varints(out, starts + 1, payloads)
    at = starts + heads
    for records in (children, tensors, slot_refs):
        records.put(out, at)
        at = at + records.per_node
    put_bytes(out, at[marked], HAS_VALUES_FIELD)
    put_bytes(out, at[~marked], _NO_VALUES_FIELD)
    return out.tobytes()


def _checkpoint_values(graph: GraphColumns) -> list[bool]:
    """``has_checkpoint_values`` per node: nodes with values or slot references, and their ancestors.

    Passes over the nodes that have children, last to first, until nothing changes: ids
    are breadth-first, so one pass usually marks every ancestor (a child of several
    parents, or a slot variable, may take another). Only containers are visited, and a
    container stops at its first marked child.
    """
    marked = [bool(a) or bool(s) for a, s in zip(graph.attribute_counts, graph.slot_counts)]
    containers = []
    start = 0
    for node_id, count in enumerate(graph.child_counts):
        if count:
            containers.append((node_id, graph.child_ids[start : start + count]))
            start += count
    containers.reverse()
    changed = True
    while changed:
        changed = False
        for node_id, child_ids in containers:
            if not marked[node_id] and any(marked[child_id] for child_id in child_ids):
                marked[node_id] = changed = True
    return marked
