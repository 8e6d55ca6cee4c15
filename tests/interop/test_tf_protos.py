"""Our .proto definitions agree with TensorFlow's field for field, and parse its messages."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor as d
from tensorflow.core.framework import tensor_shape_pb2, tensor_slice_pb2, versions_pb2
from tensorflow.core.protobuf import tensor_bundle_pb2 as tf_bundle
from tensorflow.core.protobuf import trackable_object_graph_pb2 as tf_graph
from tensorflow.python.training import checkpoint_state_pb2 as tf_state

import trackpoint as tp
from tests.helpers import EXAMPLES
from trackpoint._format._proto import checkpoint_state_pb2, tensor_bundle_pb2, trackable_object_graph_pb2


def _fields(message: d.Descriptor, seen: set[str] | None = None) -> dict[str, tuple]:
    """name -> (number, type, label, nested fields), with enums treated as int32 (same wire form)."""
    seen = seen or set()
    out = {}
    for field in message.fields:
        kind = d.FieldDescriptor.TYPE_INT32 if field.type == d.FieldDescriptor.TYPE_ENUM else field.type
        nested = None
        if field.message_type is not None and field.message_type.full_name not in seen:
            nested = _fields(field.message_type, seen | {message.full_name})
        repeated = field.is_repeated
        out[field.name] = (field.number, kind, repeated, nested)
    return out


@pytest.mark.parametrize(
    "ours, theirs, dropped",
    [
        (tensor_bundle_pb2.BundleHeaderProto, tf_bundle.BundleHeaderProto, set()),
        (tensor_bundle_pb2.BundleEntryProto, tf_bundle.BundleEntryProto, set()),
        (tensor_bundle_pb2.TensorShapeProto, tensor_shape_pb2.TensorShapeProto, set()),
        (tensor_bundle_pb2.TensorSliceProto, tensor_slice_pb2.TensorSliceProto, set()),
        (tensor_bundle_pb2.VersionDef, versions_pb2.VersionDef, set()),
        (trackable_object_graph_pb2.TrackableObjectGraph, tf_graph.TrackableObjectGraph, set()),
        (checkpoint_state_pb2.CheckpointState, tf_state.CheckpointState, set()),
    ],
)
def test_descriptors_match_tensorflow(ours, theirs, dropped: set[str]) -> None:
    assert _fields(ours.DESCRIPTOR) == {k: v for k, v in _fields(theirs.DESCRIPTOR).items() if k not in dropped}


def test_object_graph_of_a_tf_checkpoint_parses() -> None:
    raw = tp.load_variable(str(EXAMPLES / "tf_model"), "_CHECKPOINTABLE_OBJECT_GRAPH")
    ours = trackable_object_graph_pb2.TrackableObjectGraph.FromString(raw)
    theirs = tf_graph.TrackableObjectGraph.FromString(raw)
    assert ours.SerializeToString() == theirs.SerializeToString() == raw
    assert [c.local_name for c in ours.nodes[0].children] == ["model", "note", "save_counter"]
