"""Checkpoint keys from object paths (TF's ``trackable_utils``), escaping included."""

from __future__ import annotations

__all__ = [
    "OBJECT_GRAPH_KEY",
    "checkpoint_key",
    "escape_local_name",
    "slot_variable_key",
    "unescape_local_name",
]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
OBJECT_ATTRIBUTES = ".ATTRIBUTES"
OPTIMIZER_SLOTS = ".OPTIMIZER_SLOT"
SERIALIZE_TO_TENSORS = ".TENSORS"


def escape_local_name(name: str) -> str:
    """``.`` → ``..`` first, then ``/`` → ``.S``, so any name fits in a ``/``-separated path."""
    return name.replace(".", "..").replace("/", ".S")


def unescape_local_name(name: str) -> str:
    if "." not in name:
        return name
    out = []
    i = 0
    while i < len(name):
        if name[i] == "." and i + 1 < len(name):
            out.append("/" if name[i + 1] == "S" else name[i + 1])
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def checkpoint_key(object_path: str, local_name: str) -> str:
    suffix = "" if local_name == SERIALIZE_TO_TENSORS else escape_local_name(local_name)
    return f"{object_path}/{OBJECT_ATTRIBUTES}/{suffix}"


def slot_variable_key(variable_path: str, optimizer_path: str, slot_name: str) -> str:
    """Object path of a slot variable: ``<var>/.OPTIMIZER_SLOT/<optimizer>/<slot>``."""
    return f"{variable_path}/{OPTIMIZER_SLOTS}/{optimizer_path}/{escape_local_name(slot_name)}"
