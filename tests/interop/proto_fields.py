"""A protobuf message's fields as plain data, for comparing our descriptors with TensorFlow's
(test_tf_protos.py on our side, tf_side/protos.py on TensorFlow's)."""

from __future__ import annotations

from google.protobuf import descriptor as d


def fields(message: d.Descriptor, seen: set[str] | None = None) -> dict[str, tuple]:
    """name -> (number, type, label, nested fields), with enums treated as int32 (same wire form)."""
    seen = seen or set()
    out = {}
    for field in message.fields:
        kind = d.FieldDescriptor.TYPE_INT32 if field.type == d.FieldDescriptor.TYPE_ENUM else field.type
        nested = None
        if field.message_type is not None and field.message_type.full_name not in seen:
            nested = fields(field.message_type, seen | {message.full_name})
        repeated = field.is_repeated
        out[field.name] = (field.number, kind, repeated, nested)
    return out
