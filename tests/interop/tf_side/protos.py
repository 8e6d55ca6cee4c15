"""TensorFlow's own protobuf messages, for test_tf_protos.py."""

from __future__ import annotations

from tensorflow.core.framework import tensor_shape_pb2, tensor_slice_pb2, versions_pb2
from tensorflow.core.protobuf import tensor_bundle_pb2 as tf_bundle
from tensorflow.core.protobuf import trackable_object_graph_pb2 as tf_graph
from tensorflow.python.training import checkpoint_state_pb2 as tf_state

from tests.interop.proto_fields import fields

MESSAGES = {
    "BundleHeaderProto": tf_bundle.BundleHeaderProto,
    "BundleEntryProto": tf_bundle.BundleEntryProto,
    "TensorShapeProto": tensor_shape_pb2.TensorShapeProto,
    "TensorSliceProto": tensor_slice_pb2.TensorSliceProto,
    "VersionDef": versions_pb2.VersionDef,
    "TrackableObjectGraph": tf_graph.TrackableObjectGraph,
    "CheckpointState": tf_state.CheckpointState,
}


def message_fields(name: str) -> dict[str, tuple]:
    """:func:`fields` of TensorFlow's message class ``name``."""
    return fields(MESSAGES[name].DESCRIPTOR)


def reserialize_object_graph(raw: bytes) -> bytes:
    """TensorFlow's ``TrackableObjectGraph`` parsed from ``raw`` and serialized again."""
    return tf_graph.TrackableObjectGraph.FromString(raw).SerializeToString()
