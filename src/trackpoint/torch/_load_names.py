"""How ``load_state_dict`` names a checkpoint's values: object paths below a prefix, or a TF1
checkpoint's keys, then ``tp.convert``'s rules, into the module's names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import trackpoint as tp
from trackpoint._io import OBJECT_GRAPH_KEY
from trackpoint.errors import InvalidArgumentError
from trackpoint.protocol import VARIABLE_VALUE

__all__ = ["Describe", "Stored", "key_values", "open_view", "renamed", "view_values"]

#: Paths :func:`value_names` follows beyond those the module's names and the graph's nodes allow for.
_SPARE_PATHS = 10_000


#: A value's dtype name and shape, from the checkpoint's index (NotFoundError: no such key).
Describe = Callable[[str], tuple[str, list[int]]]


@dataclass(frozen=True)
class Stored:
    """A value of the checkpoint as a load sees it.

    Attributes:
        source: Its name in the checkpoint (``encoder.dense.kernel``), before any rule.
        attributes: Its tensors' names -> their checkpoint keys.
        transposed: Whether a ``transpose`` rule matched it.
    """

    source: str
    attributes: Mapping[str, str]
    transposed: bool = False


def find(view: tp.CheckpointView, prefix: str | None) -> tuple[int, str]:
    """The node of the module's subtree, and its path as given."""
    root = view.children(0)
    if prefix is None:
        return (root["model"], "model") if "model" in root else (0, "")
    node_id = 0
    for part in [p for p in prefix.split(".") if p]:
        children = view.children(node_id)
        if part not in children:
            raise InvalidArgumentError(
                f"{view.prefix}: no object at {prefix!r} (node {node_id} has {sorted(children)}); pass the prefix "
                "under which the module was saved, such as prefix='model'"
            )
        node_id = children[part]
    return node_id, prefix


def value_names(view: tp.CheckpointView, node_id: int, wanted: int) -> dict[str, dict[str, str]]:
    """The dotted name of every value below the node, by every path that reaches it, with its
    attributes (``{name: checkpoint key}``).

    Every path, as torch's ``state_dict`` names a module or tensor held under two attributes
    under both: a node reached again is expanded again (only a node on its own path is not,
    which would name values without end). The paths are bounded, since a graph of a few nodes
    can reach one by exponentially many (each node holding the next twice): by ``wanted``, the
    number of names the module itself holds, and the graph's size.

    Raises:
        InvalidArgumentError: The graph names its values by more paths than the bound.
    """
    limit = 4 * (wanted + len(view.object_graph.nodes)) + _SPARE_PATHS
    names: dict[str, dict[str, str]] = {}
    stack: list[tuple[int, str, frozenset[int]]] = [(node_id, "", frozenset())]
    visited = 0
    while stack:
        current, path, above = stack.pop()
        visited += 1
        if visited > limit:
            raise InvalidArgumentError(
                f"{view.prefix}: the object graph reaches the values below node {node_id} by more than {limit} "
                "paths (the same objects through many others), more than a module's names can be; restore it "
                "with tpt.Checkpoint, which visits each object once, or pass the prefix of the module's own subtree",
                path=view.prefix,
            )
        attributes = view.attributes(current)
        if attributes and current != node_id:
            names[path] = attributes
        inside = above | {current}
        for local, child in view.children(current).items():
            if child not in inside:
                stack.append((child, f"{path}.{local}" if path else local, inside))
    return names


def view_values(
    view: tp.CheckpointView, prefix: str | None, wanted: int
) -> tuple[str, dict[str, dict[str, str]], Describe]:
    """The path of the module's subtree (see :func:`find`), the values below it by their dotted
    paths from there (see :func:`value_names`), and how to describe a key."""
    node_id, found = find(view, prefix)

    def describe(key: str) -> tuple[str, list[int]]:
        dtype, shape, _ = view.describe(key)
        return dtype, shape

    return found, value_names(view, node_id, wanted), describe


def key_values(reader: tp.CheckpointReader, prefix: str) -> tuple[dict[str, dict[str, str]], Describe]:
    """The values of a checkpoint without an object graph, by their keys with ``/`` read as
    ``.`` (as ``tp.convert`` names them), those under the dotted ``prefix`` only and without it."""
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    start = f"{prefix}." if prefix else ""
    stored = {}
    for key in sorted(shapes):
        name = key.replace("/", ".")
        if name.startswith(start):
            stored[name[len(start) :]] = {VARIABLE_VALUE: key}

    def describe(key: str) -> tuple[str, list[int]]:
        return np.dtype(dtypes[key]).name, list(shapes[key])

    return stored, describe


def renamed(rules: Any, stored: dict[str, dict[str, str]], describe: Describe, where: str) -> dict[str, Stored]:
    """The checkpoint's values (by their names there) under the module's names, as ``rules``
    (``tp.convert``'s ``NameRules``) make them; the values they leave out are not here.

    Raises:
        InvalidArgumentError: Two values would get one name, or a transpose rule matches a
            value that is not 2-D.
    """
    out: dict[str, Stored] = {}
    for source, attributes in stored.items():
        key = attributes.get(VARIABLE_VALUE)
        shape = describe(key)[1] if rules.transpose and key is not None else []
        applied = rules.apply(source, shape, where)
        if applied is None:
            continue
        name, transposed = applied
        other = out.get(name)
        if other is not None:
            raise InvalidArgumentError(
                f"{where}: {other.source!r} and {source!r} would both be named {name!r}; change the rename rules "
                "or drop one of them",
                path=where,
                key=source,
            )
        out[name] = Stored(source, attributes, transposed)
    return out


def open_view(path: str, storage_options: Mapping[str, Any] | None) -> tp.CheckpointView | None:
    """The checkpoint's view; None when it has no object graph (TF1's), whose keys name its values."""
    try:
        return tp.CheckpointView(path, storage_options=storage_options)
    except InvalidArgumentError:
        with tp.load_checkpoint(path, storage_options=storage_options) as reader:
            if reader.has_tensor(OBJECT_GRAPH_KEY):
                raise  # another refusal: the view's own
        return None
