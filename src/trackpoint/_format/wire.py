"""Protobuf wire tags of the messages trackpoint encodes or decodes by hand.

Hand-written codecs (``bundle_writer.encode_entry``, ``entry_columns``, and the object-graph
encoder of ``trackpoint._graph.serialize``) speak the wire format directly for speed; the
tags they use are named here once, from the field numbers of the ``.proto`` files in
``_proto/``. A tag is ``field_number << 3 | wire_type``; every field here is numbered below
16, so each tag is one byte.

Examples:
    >>> hex(ENTRY_CRC32C), tag(2, LENGTH)
    ('0x35', 18)
"""

from __future__ import annotations

__all__ = [
    "ATTRIBUTE_FULL_NAME",
    "ATTRIBUTE_KEY",
    "ATTRIBUTE_NAME",
    "DIM_SIZE",
    "ENTRY_CRC32C",
    "ENTRY_DTYPE",
    "ENTRY_OFFSET",
    "ENTRY_SHAPE",
    "ENTRY_SHARD_ID",
    "ENTRY_SIZE",
    "FIXED32",
    "FIXED64",
    "GRAPH_NODE",
    "LENGTH",
    "NODE_ATTRIBUTE",
    "NODE_CHILD",
    "NODE_HAS_VALUES",
    "NODE_SLOT",
    "REFERENCE_NAME",
    "REFERENCE_NODE_ID",
    "SHAPE_DIM",
    "SLOT_NAME",
    "SLOT_NODE_ID",
    "SLOT_ORIGINAL_ID",
    "VARINT",
    "tag",
]

# Wire types.
VARINT = 0
FIXED64 = 1
LENGTH = 2  # length-delimited: bytes, strings, sub-messages
FIXED32 = 5


def tag(number: int, wire_type: int) -> int:
    """The tag of field ``number`` sent as ``wire_type``."""
    return number << 3 | wire_type


# BundleEntryProto (tensor_bundle.proto).
ENTRY_DTYPE = tag(1, VARINT)  # int32 dtype
ENTRY_SHAPE = tag(2, LENGTH)  # TensorShapeProto shape
ENTRY_SHARD_ID = tag(3, VARINT)  # int32 shard_id
ENTRY_OFFSET = tag(4, VARINT)  # int64 offset
ENTRY_SIZE = tag(5, VARINT)  # int64 size
ENTRY_CRC32C = tag(6, FIXED32)  # fixed32 crc32c
# TensorShapeProto and its Dim.
SHAPE_DIM = tag(2, LENGTH)  # repeated Dim dim
DIM_SIZE = tag(1, VARINT)  # int64 size
# TrackableObjectGraph (trackable_object_graph.proto) and its TrackableObject.
GRAPH_NODE = tag(1, LENGTH)  # repeated TrackableObject nodes
NODE_CHILD = tag(1, LENGTH)  # repeated ObjectReference children
NODE_ATTRIBUTE = tag(2, LENGTH)  # repeated SerializedTensor attributes
NODE_SLOT = tag(3, LENGTH)  # repeated SlotVariableReference slot_variables
NODE_HAS_VALUES = tag(5, LENGTH)  # google.protobuf.BoolValue has_checkpoint_values
# ObjectReference.
REFERENCE_NODE_ID = tag(1, VARINT)  # int32 node_id
REFERENCE_NAME = tag(2, LENGTH)  # string local_name
# SlotVariableReference.
SLOT_ORIGINAL_ID = tag(1, VARINT)  # int32 original_variable_node_id
SLOT_NAME = tag(2, LENGTH)  # string slot_name
SLOT_NODE_ID = tag(3, VARINT)  # int32 slot_variable_node_id
# SerializedTensor.
ATTRIBUTE_NAME = tag(1, LENGTH)  # string name
ATTRIBUTE_FULL_NAME = tag(2, LENGTH)  # string full_name
ATTRIBUTE_KEY = tag(3, LENGTH)  # string checkpoint_key
