"""Our .proto definitions agree with TensorFlow's field for field, and parse its messages."""

from __future__ import annotations

import pytest

import trackpoint as tp
from tests.helpers import EXAMPLES
from tests.interop.proto_fields import fields
from tests.interop.tf_process import tf_side
from trackpoint._format._proto import checkpoint_state_pb2, tensor_bundle_pb2, trackable_object_graph_pb2

pytestmark = pytest.mark.interop

tf_protos = tf_side("protos")


@pytest.mark.parametrize(
    "ours, theirs, dropped",
    [
        (tensor_bundle_pb2.BundleHeaderProto, "BundleHeaderProto", set()),
        (tensor_bundle_pb2.BundleEntryProto, "BundleEntryProto", set()),
        (tensor_bundle_pb2.TensorShapeProto, "TensorShapeProto", set()),
        (tensor_bundle_pb2.TensorSliceProto, "TensorSliceProto", set()),
        (tensor_bundle_pb2.VersionDef, "VersionDef", set()),
        (trackable_object_graph_pb2.TrackableObjectGraph, "TrackableObjectGraph", set()),
        (checkpoint_state_pb2.CheckpointState, "CheckpointState", set()),
    ],
)
def test_descriptors_match_tensorflow(ours, theirs: str, dropped: set[str]) -> None:
    """``theirs``: the class of TensorFlow's message (tf_side/protos.py's MESSAGES)."""
    assert fields(ours.DESCRIPTOR) == {k: v for k, v in tf_protos.message_fields(theirs).items() if k not in dropped}


def test_object_graph_of_a_tf_checkpoint_parses() -> None:
    raw = tp.load_variable(str(EXAMPLES / "tf_model"), "_CHECKPOINTABLE_OBJECT_GRAPH")
    ours = trackable_object_graph_pb2.TrackableObjectGraph.FromString(raw)
    theirs = tf_protos.reserialize_object_graph(raw)
    assert ours.SerializeToString() == theirs == raw
    assert [c.local_name for c in ours.nodes[0].children] == ["model", "note", "save_counter"]
