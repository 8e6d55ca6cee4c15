"""Walk live objects into a ``TrackableObjectGraph`` and the ordered tensors of a checkpoint.

Node ids follow TF exactly: breadth-first from the root over children in tracking order
(the root's attached dependencies after its own children), each object named by its
first-discovered path; slot variables get ids after every BFS node. Tensors come in node
order, Python state after them, the graph last; keys carry TF 2.21's double escape of
tensor names. The graph message is encoded by :mod:`~trackpoint._graph.encode_graph`.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast, overload

from trackpoint._format.staging import copy_values
from trackpoint._graph.encode_graph import GraphColumns, encode_graph
from trackpoint._graph.keys import OBJECT_GRAPH_KEY, checkpoint_key, escape_local_name, slot_variable_key
from trackpoint._graph.live import breadth_first
from trackpoint._graph.save_layout import Entry, SaveLayout, cannot_save, log, make_layout, reuse, tensors_of
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.epoch import structure_epoch
from trackpoint._tracking.protocol import VARIABLE_VALUE, AfterSave
from trackpoint._tracking.python_state import PythonState
from trackpoint._tracking.slots import slot_variables
from trackpoint.errors import InvalidArgumentError

__all__ = ["SerializedCheckpoint", "serialize"]

_VARIABLE_ATTRIBUTE = escape_local_name(VARIABLE_VALUE)
_VARIABLE_KEY_SUFFIX = checkpoint_key("", _VARIABLE_ATTRIBUTE)


class _GraphLists:
    """The object graph, as columns until it is first encoded, then as its bytes.

    Saves that reuse a layout share one instance, so the graph is encoded once per layout
    and the columns (most of a first save's memory) go once it is.
    """

    __slots__ = ("_columns", "_encoded", "_lock")

    def __init__(self, columns: GraphColumns) -> None:
        self._columns: GraphColumns | None = columns
        self._encoded: bytes | None = None
        self._lock = threading.Lock()  # an async save encodes on its writer thread

    def encoded(self) -> bytes:
        """The serialized ``TrackableObjectGraph``."""
        with self._lock:
            if self._encoded is None:
                assert self._columns is not None
                self._encoded = encode_graph(self._columns)
                self._columns = None
            return self._encoded


@dataclass(frozen=True)
class SerializedCheckpoint:
    """What a save writes, captured at the moment of the call.

    The object graph is kept as plain lists and encoded only by :meth:`with_graph`, so an
    async save leaves that work to the writer thread.

    Attributes:
        keys: Checkpoint keys in write order, the graph's not included.
        arrays: The value under each key. Kept apart from the keys, which a save reusing its
            layout shares with it: an async save of many variables returns sooner for not
            pairing them (:meth:`with_graph` does, on the writer thread).
        owners: The object each value came from, parallel to ``keys``.
    """

    keys: list[str]
    arrays: list[Any]
    owners: list[Trackable]
    _graph: _GraphLists
    copy_on_write: bool = False  # every owner's class is copy-on-write (known without asking)

    def snapshot(self) -> SerializedCheckpoint:
        """A copy whose values cannot change any more, for a write that happens later.

        The arrays of owners whose class is copy-on-write (``protocol.Saveable._tp_copy_on_write``:
        ``tp.Variable``'s are never modified in place, assign installs a new array) are taken as
        they are; any other array is copied.
        """
        if self.copy_on_write:
            return self
        # Asked of the few distinct classes rather than of every owner.
        classes: set[type[Trackable]] = set(map(type, self.owners))
        copied = {cls for cls in classes if not cls._tp_copy_on_write}
        if not copied:
            return self
        rows = [i for i, owner in enumerate(self.owners) if type(owner) in copied]
        arrays = list(self.arrays)
        for row, copy in zip(rows, copy_values([arrays[i] for i in rows])):
            arrays[row] = copy
        return SerializedCheckpoint(self.keys, arrays, self.owners, self._graph)

    def with_graph(self) -> tuple[Sequence[tuple[str, Any]], list[Trackable | None]]:
        """All tensors to write, the encoded object graph last, and their owners."""
        return _Tensors(self.keys, self.arrays, (OBJECT_GRAPH_KEY, self._graph.encoded())), [*self.owners, None]


class _Tensors(Sequence[tuple[str, Any]]):
    """The ``(key, value)`` pairs of a save, then one more, paired only when asked for:
    a tuple per tensor would be most of the memory a save of many small ones adds."""

    def __init__(self, keys: list[str], values: list[Any], last: tuple[str, Any]) -> None:
        self._keys, self._values, self._last = keys, values, last

    def __len__(self) -> int:
        return len(self._keys) + 1

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        yield from zip(self._keys, self._values)
        yield self._last

    def columns(self) -> tuple[list[str], list[Any]]:
        """The keys and the values, as two new lists: 20,000 pairs iterated cost 5 ms of the GIL
        on the writer thread of an async save, these two copies a tenth of that."""
        return [*self._keys, self._last[0]], [*self._values, self._last[1]]

    @overload
    def __getitem__(self, index: int) -> tuple[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, Any] | list[tuple[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index == len(self._keys):
            return self._last
        return self._keys[index], self._values[index]


def _after_save(hooks: list[Trackable]) -> None:
    for obj in cast(list[AfterSave], hooks):
        obj._tp_after_save()  # grouped objects (split dependencies) check they were saved together


def serialize(
    root: Trackable,
    attached: Mapping[str, Trackable] = {},
    previous: SaveLayout | None = None,
    weak_root: bool = False,
) -> tuple[SerializedCheckpoint, SaveLayout | None]:
    """Build the object graph and the ordered ``(key, value)`` list for a save.

    With the layout of the previous save, and nothing changed that it depends on (see
    :mod:`~trackpoint._graph.save_layout`), only the values are gathered again: the walk,
    the keys and the graph are reused.

    With ``weak_root`` (the caller holds the root only weakly), no layout is kept: it would
    keep the graph's objects alive.

    Returns:
        The serialized checkpoint, and a layout for the next save (None when the layout of
        these objects cannot be trusted).

    Raises:
        InvalidArgumentError: A slot variable is also tracked as a regular dependency.
    """
    epoch = structure_epoch()
    if previous is not None:
        arrays = reuse(previous)
        if arrays is not None:
            _after_save(previous.hooks)
            return SerializedCheckpoint(
                previous.keys, arrays, previous.owners, previous.graph, previous.copy_on_write
            ), previous
    else:
        log.debug("walking the objects: no previous save of them")
    objects, path_strings, graph = _graph_of(root, attached)
    gathered = _Gathered(graph)
    gathered.add_all(objects, path_strings)
    hooks = _hooks(objects)
    _after_save(hooks)
    keys, values, owners, entries = gathered.in_write_order()
    lists = _GraphLists(graph)
    layout = make_layout(epoch, objects, entries, lists, owners, keys, hooks, weak_root)
    return SerializedCheckpoint(keys, values, owners, lists), layout


def _graph_of(root: Trackable, attached: Mapping[str, Trackable]) -> tuple[list[Trackable], list[str], GraphColumns]:
    """Every object of the save (the walk's, then the slot variables), each one's escaped path
    as checkpoint keys spell it, and the graph's children and slot columns."""
    walk = breadth_first(root, attached)
    ids = walk.ids
    graph = GraphColumns(
        child_counts=list(map(len, walk.children)),
        child_ids=[ids[id(child)] for kids in walk.children if kids for child in kids.values()],
        child_names=[name for kids in walk.children if kids for name in kids],
    )
    nodes = walk.nodes
    objects = list(nodes)
    path_strings = [""]
    for parent, name in zip(walk.parents[1:], walk.names[1:]):
        parent_path, escaped = path_strings[parent], escape_local_name(name)
        path_strings.append(f"{parent_path}/{escaped}" if parent_path else escaped)
    del walk  # its children dicts: a name and a reference per object
    slot_refs: dict[int, list[tuple[int, str, int]]] = {}
    for opt_id, slot_name, var_id, slot in slot_variables(nodes):
        if id(slot) in ids:
            raise InvalidArgumentError(
                f"slot variable {slot_name!r} of {path_strings[var_id]} is also tracked as a regular "
                "dependency; TensorFlow cannot checkpoint that either"
            )
        slot_refs.setdefault(opt_id, []).append((var_id, slot_name, len(objects)))
        objects.append(slot)
        graph.child_counts.append(0)
        path_strings.append(slot_variable_key(path_strings[var_id], path_strings[opt_id], slot_name))
    graph.slot_counts = [0] * len(objects)
    for opt_id, refs in sorted(slot_refs.items()):
        graph.slot_counts[opt_id] = len(refs)
        for var_id, slot_name, slot_id in refs:
            graph.slot_variables.append(var_id)
            graph.slot_names.append(slot_name)
            graph.slot_ids.append(slot_id)
    return objects, path_strings, graph


class _Gathered:
    """The values of a save, their keys and owners, and each object's attribute columns of the graph."""

    def __init__(self, graph: GraphColumns) -> None:
        self.graph = graph
        self.keys: list[str] = []
        self.values: list[Any] = []
        self.owners: list[Trackable] = []
        self.python_tensors: list[tuple[str, Any]] = []
        self.python_owners: list[Trackable] = []
        # An object offering its variable value alone has itself as its layout entry; any other
        # object (object, tensor names, keys) (see save_layout).
        self.entries: list[Entry] = []
        self.python_entries: list[Entry] = []

    def add_all(self, objects: list[Trackable], path_strings: list[str]) -> None:
        """Gather every object's tensors, in node order."""
        graph = self.graph
        counts, attribute_names, full_names, attribute_keys = (
            graph.attribute_counts,
            graph.attribute_names,
            graph.full_names,
            graph.attribute_keys,
        )
        keys, values, owners, entries = self.keys, self.values, self.owners, self.entries
        # Each class's way to its full name and variable value (protocol.VariableValue), or None.
        single: dict[type, Callable[[Any], tuple[str, Any]] | None] = {}
        for node_id, obj in enumerate(objects):
            cls = type(obj)
            try:
                name_and_value = single[cls]
            except KeyError:
                name_and_value = single[cls] = _name_and_value(cls)
            if name_and_value is None:
                self._add_tensors(obj, path_strings[node_id])
                continue
            # One variable value under a name that needs no escaping, so its key is the path and
            # a fixed suffix (_add_tensors gives the same key) and no dict is built.
            key = path_strings[node_id] + _VARIABLE_KEY_SUFFIX
            try:
                full_name, value = name_and_value(obj)
            except InvalidArgumentError as exc:
                raise cannot_save(exc, obj, path_strings[node_id]) from exc
            counts.append(1)
            attribute_names.append(_VARIABLE_ATTRIBUTE)
            full_names.append(full_name)
            attribute_keys.append(key)
            keys.append(key)
            values.append(value)
            owners.append(obj)
            entries.append(obj)

    def _add_tensors(self, obj: Trackable, path: str) -> None:
        graph = self.graph
        tensors = tensors_of(obj, path)
        graph.attribute_counts.append(len(tensors))
        if not tensors:
            return
        full_name = obj._checkpoint_full_name()
        is_python = isinstance(obj, PythonState)
        node_keys = []
        for tensor_name, value in tensors.items():
            attribute_name = escape_local_name(tensor_name)
            # TF 2.21 escapes the already escaped name again when forming the key.
            key = checkpoint_key(path, attribute_name)
            graph.attribute_names.append(attribute_name)
            graph.full_names.append(full_name)
            graph.attribute_keys.append(key)
            if is_python:
                self.python_tensors.append((key, value))
                self.python_owners.append(obj)
            else:
                self.keys.append(key)
                self.values.append(value)
                self.owners.append(obj)
            node_keys.append(key)
        (self.python_entries if is_python else self.entries).append((obj, list(tensors), node_keys))

    def in_write_order(self) -> tuple[list[str], list[Any], list[Trackable], list[Entry]]:
        """Keys, values, owners and layout entries: Python state after every other value."""
        keys, values, owners = self.keys, self.values, self.owners
        keys.extend(key for key, _ in self.python_tensors)
        values.extend(value for _, value in self.python_tensors)
        owners.extend(self.python_owners)
        return keys, values, owners, self.entries + self.python_entries


def _name_and_value(cls: type) -> Callable[[Any], tuple[str, Any]] | None:
    """How the save gets an object's full name and variable value, for a class that offers its
    value alone (``protocol.VariableValue``): its attributes read in C when it names them
    (``_tp_value_fields``: no method call per variable), else its two methods; else None."""
    value_of = getattr(cls, "_tp_variable_value", None)
    if value_of is None:
        return None
    fields = getattr(cls, "_tp_value_fields", None)
    if fields is not None:
        return operator.attrgetter(*fields)
    return lambda obj: (obj._checkpoint_full_name(), value_of(obj))


def _hooks(objects: list[Trackable]) -> list[Trackable]:
    """The objects with an after-save check, found by class: a model has many objects, few classes."""
    classes = {cls for cls in set(map(type, objects)) if hasattr(cls, "_tp_after_save")}
    return [obj for obj in objects if type(obj) in classes] if classes else []
