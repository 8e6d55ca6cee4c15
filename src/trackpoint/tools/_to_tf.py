"""Safetensors weights to a TF checkpoint whose object graph is built from the dotted names.

Each ``.``-separated component of a name is a child object, breadth first from the root, each
object's children in sorted order; the last component is a variable node with one
``VARIABLE_VALUE`` attribute whose ``full_name`` is the whole dotted name. Keys are spelled by
trackpoint's own key rules (``model.dense.kernel`` → ``model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE``,
a ``/`` inside a component escaped to ``.S``). This is the graph ``tp.Checkpoint(model=...)`` writes
for the same tree of ``tp.Module`` objects and ``tp.Variable(value, name=<dotted name>)``: the names'
first components are the ``Checkpoint``'s keyword arguments (``tf.train.Checkpoint(model=module)``).

``tf.train.Checkpoint.restore()`` creates a ``save_counter`` and ``assert_consumed()`` then wants
one in the checkpoint, while ``read()`` creates none and wants none. So a ``save_counter`` (int64
0) is added as the root's last child unless ``save_counter=False`` (or the weights hold one).

A name with an empty component (``linear..weight``, from the TF1 key ``linear//weight``) gets an
empty local name there, as that key has. A name that is both a tensor and the parent of others (``dense.kernel``
and ``dense.kernel.Adam``, as TF1 keys converted to safetensors give) becomes a node holding both a
value and children: the checkpoint is faithful, but no ``tf.Variable`` has children, so restore such
a checkpoint into TF objects only after ``drop``-ing or ``rename``-ing one side.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trackpoint._io import OBJECT_GRAPH_KEY, checkpoint_key, escape_local_name, from_numpy, parse_graph
from trackpoint._io import trackable_object_graph_pb2 as pb
from trackpoint.errors import DataLossError, InvalidArgumentError
from trackpoint.tools import _chunk_copy, _embedded_graph
from trackpoint.tools._hf_layout import SafetensorsSource
from trackpoint.tools._names import MappingRow, NameRules, check_conflicts
from trackpoint.tools._safetensors_format import SafetensorsFile
from trackpoint.tools._tensor_copy import check_parents, new_bundle

# What a conversion to TF made: the mapping's rows, and the files written (the index last; none for a dry run).
Made = tuple[tuple[MappingRow, ...], tuple[str, ...]]

__all__ = ["build_graph", "convert_to_tf", "safetensors_chunks"]

_COUNTER = "save_counter"
_BLOCK_BYTES = 16 << 20  # the bounded buffer a transpose reads rows into


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    tensor: str | None = None  # the dotted name of the variable this node holds


def _tree(names: list[str]) -> _Node:
    root = _Node()
    for name in names:
        node = root
        for part in name.split("."):
            node = node.children.setdefault(part, _Node())
        node.tensor = name
    return root


def build_graph(names: list[str], add_save_counter: bool) -> tuple[pb.TrackableObjectGraph, list[tuple[str, str]]]:
    """The object graph for dotted ``names`` and ``[(name, checkpoint key)]`` in breadth-first order.

    The ``save_counter`` added by ``add_save_counter`` appears in the list under that name.

    Examples:
        >>> graph, keys = build_graph(["model.dense.kernel", "model.dense.bias"], add_save_counter=False)
        >>> keys
        [('model.dense.bias', 'model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE'), ('model.dense.kernel', 'model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE')]
        >>> [c.local_name for c in graph.nodes[2].children]
        ['bias', 'kernel']
    """
    root = _tree(names)
    for node in _walk(root):
        node.children = dict(sorted(node.children.items()))
    if add_save_counter and _COUNTER not in root.children:
        root.children[_COUNTER] = _Node(tensor=_COUNTER)
    graph = pb.TrackableObjectGraph()
    order: list[tuple[_Node, tuple[str, ...]]] = [(root, ())]
    keys = []
    for node, path in order:  # breadth first: grows as it goes
        proto = graph.nodes.add()
        for local, child in node.children.items():
            proto.children.add(node_id=len(order), local_name=local)
            order.append((child, (*path, local)))
        if node.tensor is not None:
            key = checkpoint_key("/".join(escape_local_name(p) for p in path), "VARIABLE_VALUE")
            proto.attributes.add(name="VARIABLE_VALUE", full_name=node.tensor, checkpoint_key=key)
            keys.append((node.tensor, key))
        proto.has_checkpoint_values.value = True  # every node leads to a variable
    return graph, keys


def _walk(root: _Node) -> list[_Node]:
    nodes = [root]
    for node in nodes:
        nodes.extend(node.children.values())
    return nodes


def convert_to_tf(
    src: str, prefix: str, rules: NameRules, skip_unsupported: bool, save_counter: bool, dry_run: bool
) -> Made:
    """:func:`trackpoint.tools.convert` from safetensors (see there): its rows and files."""
    del skip_unsupported  # every safetensors dtype has a TF checkpoint counterpart
    if os.path.isdir(prefix) or prefix.endswith(os.sep):
        raise InvalidArgumentError(
            f"{prefix}: give the TF checkpoint a prefix such as {os.path.join(prefix, 'ckpt')!r}, not a directory"
        )
    # A file where a directory of the prefix must be: refused now, naming it, not as a raw OSError later.
    check_parents(prefix, prefix)
    source = SafetensorsSource(src)
    try:
        embedded = _embedded(source, rules)
        if embedded is not None:
            return _convert_whole(source, prefix, *embedded, dry_run)
        rows = []
        for name in sorted(source.where):
            info = source.where[name].tensors[name]
            applied = rules.apply(name, info.shape, source.where[name].path)
            if applied is not None:
                new, transposed = applied
                rows.append(
                    MappingRow(name, new, info.dtype, info.shape[::-1] if transposed else info.shape, transposed)
                )
        rows.sort(key=lambda row: row.name)
        check_conflicts(rows, source.index_path)
        graph, keys = build_graph([row.name for row in rows], save_counter)
        if dry_run:
            return tuple(rows), ()
        by_name = {row.name: row for row in rows}
        _write(source, prefix, by_name, keys, graph.SerializeToString())
    finally:
        source.close()
    files = [prefix + ".index", prefix + ".data-00000-of-00001"]
    return tuple(rows), tuple(files[::-1])


def _write(
    source: SafetensorsSource,
    prefix: str,
    by_name: dict[str, MappingRow],
    keys: list[tuple[str, str]],
    graph: bytes,
    strings: Mapping[str, Any] | None = None,
) -> None:
    """Write ``keys`` (``(name, checkpoint key)``, in order) from ``source``, the string tensors
    ``strings`` by key, and the serialized object ``graph``."""
    # A large tensor is copied a chunk at a time through ``chunk`` (no buffer as large as itself: see
    # chunk_copy); a small or transposed one is read whole into ``scratch``.
    whole = [row for row in by_name.values() if not _streamed(source, row)]
    largest = max((source.where[row.source].tensors[row.source].nbytes for row in whole), default=0)
    scratch = bytearray(largest)
    chunk = bytearray(_chunk_copy.CHUNK_BYTES if len(whole) < len(by_name) else 0)
    # A transposed tensor is read in blocks of rows into this second, bounded buffer and each block
    # put transposed into ``scratch``: one whole copy plus a block, not two whole copies.
    blocks = bytearray(min(largest, _BLOCK_BYTES) if any(row.transposed for row in by_name.values()) else 0)
    with new_bundle(prefix) as writer:
        for index, (name, key) in enumerate(keys):  # breadth first, as tf.train.Checkpoint writes values
            _prefetch(source, by_name, keys[index + 1 : index + 2])
            row = by_name.get(name)
            if row is None:  # the save_counter added here, or a string tensor of the metadata
                writer.add(key, strings[name] if strings and name in strings else np.int64(0))
                continue
            opened = source.where[row.source]
            info = opened.tensors[row.source]
            dtype = from_numpy(info.dtype)
            if dtype is not None and _streamed(source, row):
                writer.add_chunks(key, dtype, info.shape, safetensors_chunks(opened, row.source, chunk))
                continue
            shape = row.shape if row.transposed else info.shape
            count = math.prod(shape)
            value = np.frombuffer(scratch, info.dtype, count).reshape(shape) if count else np.empty(shape, info.dtype)
            if not count:
                pass  # nothing to read; a transposed empty tensor only has its shape swapped
            elif row.transposed:
                _read_transposed(opened, row.source, value, blocks)
            else:
                opened.read(row.source, out=value)
            writer.add_many([(key, value)])
        writer.add(OBJECT_GRAPH_KEY, graph)


def _streamed(source: SafetensorsSource, row: MappingRow) -> bool:
    """Whether ``row`` is copied in chunks: a large tensor stored as it is written (not transposed)."""
    info = source.where[row.source].tensors[row.source]
    return not row.transposed and info.nbytes >= _chunk_copy.STREAM_BYTES and from_numpy(info.dtype) is not None


def safetensors_chunks(
    opened: SafetensorsFile, name: str, memory: bytearray, first: int = 0, stop: int | None = None
) -> Iterator[memoryview]:
    """The bytes of tensor ``name`` of ``opened`` (of its elements ``first`` to ``stop``, by default
    all), read into ``memory`` a chunk at a time (each valid until the next): safetensors'
    little-endian row-major bytes are what a bundle stores."""
    info = opened.tensors[name]
    count, step = math.prod(info.shape) if stop is None else stop, len(memory) // info.dtype.itemsize
    for start in range(first, count, step):
        piece = np.frombuffer(memory, info.dtype, min(step, count - start))
        opened.read_flat(name, start, piece)
        yield memoryview(piece.view(np.uint8))  # type: ignore[arg-type]  # numpy types its buffer from 3.12


def _prefetch(source: SafetensorsSource, by_name: dict[str, MappingRow], following: list[tuple[str, str]]) -> None:
    """Start reading the tensor that comes next while this one is written: they are taken in the
    order of the graph, not of the file, so the kernel's readahead would not (see ``readahead``)."""
    for name, _ in following:
        row = by_name.get(name)
        if row is not None:
            source.where[row.source].prefetch(row.source)


def _read_transposed(opened: SafetensorsFile, name: str, out: np.ndarray, blocks: bytearray) -> None:
    """The 2-D tensor ``name`` of ``opened``, transposed into the C-contiguous ``out``, a block at a time.

    A block is as many whole rows as ``blocks`` holds, or, for rows larger than it, a piece of one
    row: the extra memory stays ``len(blocks)`` whatever the shape.
    """
    rows, columns = out.shape[1], out.shape[0]  # the source's shape
    per_block = max(1, len(blocks) // out.itemsize)
    if per_block >= columns:
        step = per_block // columns
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            block = np.frombuffer(blocks, out.dtype, (stop - start) * columns).reshape(stop - start, columns)
            out[:, start:stop] = opened.read_rows(name, start, block).T
        return
    for row in range(rows):
        for first in range(0, columns, per_block):
            last = min(columns, first + per_block)
            piece = np.frombuffer(blocks, out.dtype, last - first)
            out[first:last, row] = opened.read_flat(name, row * columns + first, piece)


def _embedded(source: SafetensorsSource, rules: NameRules) -> tuple[bytes, dict[str, Any], str] | None:
    """The TF object graph and string tensors a file of ``source`` carries (see :mod:`._embedded_graph`),
    with that file's path; None if none does."""
    for path, opened in source.files.items():
        found = _embedded_graph.decode(opened.metadata, opened.path)
        if found is None:
            continue
        if rules != NameRules():
            raise InvalidArgumentError(
                f"{path}: these weights carry their TF checkpoint's object graph (converted with include_graph), "
                "so they convert back whole, under their TF keys, without rename/only/drop/transpose rules; "
                "use tp.rewrite on the result",
                path=path,
            )
        return (*found, opened.path)
    return None


def _convert_whole(
    source: SafetensorsSource, prefix: str, graph_bytes: bytes, strings: dict[str, Any], path: str, dry_run: bool
) -> Made:
    """Safetensors converted with ``include_graph`` back to their checkpoint: the same keys and graph."""
    graph = parse_graph(graph_bytes, path)
    stored = sorted(set(source.where) | set(strings))
    # An attribute's tensors: its key, or keys it begins (a saveable of several tensors, such as a
    # lookup table's "<key>-keys" and "<key>-values").
    found = {}
    for node in graph.nodes:
        for attribute in node.attributes:
            key = attribute.checkpoint_key
            start = bisect.bisect_left(stored, key)
            stop = start
            while stop < len(stored) and stored[stop].startswith(key):
                stop += 1
            found[key] = stored[start:stop]
    missing = [key for key, keys in found.items() if not keys]
    if missing:
        raise DataLossError(
            f"{path}: its object graph names {len(missing)} tensor(s) the weights lack, e.g. {missing[0]!r}; the "
            "weights, or the TF checkpoint they came from, are incomplete (a per-device part of a save? tp.merge "
            "the parts first)",
            path=path,
            key=missing[0],
        )
    rows = tuple(
        MappingRow(name, name, info.dtype, info.shape, False)
        for name in sorted(source.where)
        for info in [source.where[name].tensors[name]]
    )
    check_conflicts([*rows, *(MappingRow(key, key, np.dtype(object), (), False) for key in strings)], path)
    if dry_run:
        return rows, ()
    # Values in the graph's order (as TF writes them), then any the graph does not name.
    order = list(dict.fromkeys([key for keys in found.values() for key in keys] + stored))
    _write(source, prefix, {row.name: row for row in rows}, [(key, key) for key in order], graph_bytes, strings)
    files = [prefix + ".index", prefix + ".data-00000-of-00001"]
    return rows, tuple(files[::-1])
