"""Default names for a TF checkpoint's tensors: object paths from the object graph, or the raw keys.

Object-based checkpoints (TF2, Keras, SavedModel ``variables/``) name each value by the path of
local names from the root to its object, joined by ``.``: the key
``model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE`` becomes ``model.dense.kernel``. An object is
named by its first path breadth first, as TF names it in its keys. An attribute other than
``VARIABLE_VALUE`` adds its own name (``model.metric.py_state``).

Left out unless asked for:

* the object graph itself (``_CHECKPOINTABLE_OBJECT_GRAPH``; it is the structure, not a value);
* optimizer slot variables (``include_slots``), named
  ``<variable path>.OPTIMIZER_SLOT.<optimizer path>.<slot>`` as TF's key spells them;
* the root's ``save_counter`` (``include_save_counter``), a bookkeeping counter no model holds.

TF1 name-based checkpoints have no graph: a key's ``/`` become ``.`` (``dense/kernel`` becomes
``dense.kernel``) and every tensor is kept: their optimizer slots (``dense/kernel/Adam``) and
``global_step`` cannot be told apart from weights reliably, so ``drop`` them by pattern. A key of
an object-based checkpoint that no node of its graph names (a lookup table's ``table-keys``) is
named from its key by :func:`name_from_key`, so that no value is lost silently; so are the keys
of a graph-less part spelled the TF2 way, whose slots and ``save_counter`` are left out as above.

Examples:
    >>> import numpy as np, tempfile
    >>> import trackpoint as tp
    >>> model = tp.Module(); model.dense = tp.Module(); model.dense.kernel = tp.Variable(np.ones((2, 3)))
    >>> path = tp.Checkpoint(model=model).save(tempfile.mkdtemp() + "/ckpt")
    >>> with tp.load_checkpoint(path) as reader:
    ...     default_names(reader)
    [('model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE', 'model.dense.kernel')]
"""

from __future__ import annotations

from trackpoint._io import (
    OBJECT_ATTRIBUTES,
    OBJECT_GRAPH_KEY,
    OPTIMIZER_SLOTS,
    first_parents,
    parse_graph,
    unescape,
    unescape_local_name,
)
from trackpoint._io import trackable_object_graph_pb2 as pb
from trackpoint.errors import InvalidArgumentError
from trackpoint.reader import CheckpointReader

__all__ = ["default_names", "name_from_key"]

_COUNTER_KEY = "save_counter/.ATTRIBUTES/VARIABLE_VALUE"
_MAX_NAME_CHARS = 1 << 16  # a hostile deep chain must not build huge names; no real path comes near


def name_from_key(key: str) -> str:
    """A key no object graph names, as a dotted name.

    A TF1 key's ``/`` become ``.``. A key spelled the TF2 way (``<path>/.ATTRIBUTES/<attribute>``,
    as in a per-device part of a save, or a value stored beside its graph node's attribute) gets
    the object path its key spells, unescaped, and the attribute's name unless it is
    ``VARIABLE_VALUE``; ``/.OPTIMIZER_SLOT/`` reads ``.OPTIMIZER_SLOT.``.

    Examples:
        >>> name_from_key("bert/encoder/layer_0/kernel")
        'bert.encoder.layer_0.kernel'
        >>> name_from_key("net/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE")
        'net.dense.kernel.OPTIMIZER_SLOT.optimizer.m'
        >>> name_from_key("lookup/.ATTRIBUTES/table-keys")
        'lookup.table-keys'
    """
    path, marker, attribute = key.rpartition(f"/{OBJECT_ATTRIBUTES}/")
    if not marker:
        return key.replace("/", ".")
    parts = [OPTIMIZER_SLOTS.lstrip(".") if p == OPTIMIZER_SLOTS else unescape_local_name(p) for p in path.split("/")]
    if attribute != "VARIABLE_VALUE":
        parts.append(unescape_local_name(attribute))
    return ".".join(parts)


def _is_slot_key(key: str) -> bool:
    return f"/{OPTIMIZER_SLOTS}/" in key


def default_names(
    reader: CheckpointReader, keys: str = "path", include_slots: bool = False, include_save_counter: bool = False
) -> list[tuple[str, str]]:
    """``[(checkpoint key, default name)]`` of the tensors a conversion takes, in key order.

    Args:
        reader: The open checkpoint.
        keys: ``"path"`` for object paths (TF1 keys dotted), ``"tf"`` for the raw keys.
        include_slots: Also take optimizer slot variables.
        include_save_counter: Also take the root's ``save_counter``.

    Raises:
        InvalidArgumentError: ``keys`` is neither ``"path"`` nor ``"tf"``.
        DataLossError: The object graph is malformed.
    """
    if keys not in ("path", "tf"):
        raise InvalidArgumentError(
            f"keys={keys!r}: choose 'path' (object paths, model.dense.kernel) or 'tf' (raw keys)"
        )
    available = sorted(k for k in reader.get_variable_to_shape_map() if k != OBJECT_GRAPH_KEY)
    names: dict[str, str] = {}
    excluded: set[str] = set()
    if reader.has_tensor(OBJECT_GRAPH_KEY):
        raw = reader.get_tensor(OBJECT_GRAPH_KEY)
        if not isinstance(raw, bytes):
            raise InvalidArgumentError(f"{reader.prefix}: {OBJECT_GRAPH_KEY} is not a scalar string")
        graph = parse_graph(raw, reader.prefix)
        names, excluded = _graph_names(graph, include_slots, include_save_counter)
    else:  # no graph; keys spelled the TF2 way still say which are slots and the counter
        for key in available:
            if (_is_slot_key(key) and not include_slots) or (key == _COUNTER_KEY and not include_save_counter):
                excluded.add(key)
    result = []
    for key in available:
        if key in excluded:
            continue
        name = names.get(key) if keys == "path" else key
        result.append((key, name if name is not None else name_from_key(key)))
    return result


def _graph_names(
    graph: pb.TrackableObjectGraph, include_slots: bool, include_save_counter: bool
) -> tuple[dict[str, str], set[str]]:
    """``({key: object path}, {keys left out})`` from the graph."""
    parent = first_parents(graph)
    order = [0, *parent]

    def path(node_id: int) -> list[str]:
        parts: list[str] = []
        length = 0
        while node_id != 0:
            node_id, local = parent[node_id]
            parts.append(local)
            length += len(local) + 1
            if length > _MAX_NAME_CHARS:
                raise InvalidArgumentError(f"an object path of the graph is longer than {_MAX_NAME_CHARS} characters")
        return parts[::-1]

    names: dict[str, str] = {}
    excluded: set[str] = set()
    reachable = set(order)
    counter = next((c.node_id for c in graph.nodes[0].children if c.local_name == "save_counter"), None)
    for node_id in order:
        for attribute in graph.nodes[node_id].attributes:
            parts = path(node_id)
            if attribute.name != "VARIABLE_VALUE" or not parts:
                parts.append(unescape(attribute.name))
            names.setdefault(attribute.checkpoint_key, ".".join(parts))
            if node_id == counter and not include_save_counter:
                excluded.add(attribute.checkpoint_key)
    for node_id in order:
        for slot in graph.nodes[node_id].slot_variables:
            if slot.slot_variable_node_id in reachable:
                continue  # a slot that is also an ordinary object keeps its object path
            variable = slot.original_variable_node_id
            base = ".".join(path(variable)) if variable in reachable else f"node{variable}"
            name = f"{base}.OPTIMIZER_SLOT.{'.'.join(path(node_id))}.{slot.slot_name}"
            for attribute in graph.nodes[slot.slot_variable_node_id].attributes:
                suffix = "" if attribute.name == "VARIABLE_VALUE" else "." + unescape(attribute.name)
                names.setdefault(attribute.checkpoint_key, name + suffix)
                if not include_slots:
                    excluded.add(attribute.checkpoint_key)
    return names, excluded
