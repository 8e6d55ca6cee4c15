"""Matching a checkpoint's object graph to live objects, now or as they are created.

A :class:`RestoreCoordinator` holds one restore: the parsed graph, the reader, which nodes
are bound to which objects. A :class:`CheckpointPosition` is one node of that graph. A
restore binds nodes to objects and walks on to the children the objects have, gathering a
plan: the values to assign, a pending position to leave on an object for each child it
does not have yet (restore-on-create), the slots to ask optimizers for. The plan is carried
out only once every value it assigns was read and checked, so a restore changes all the
objects it found or none (see :meth:`RestoreCoordinator.restore`). Slot variables are
restored once both their variable and their optimizer are bound, in either order.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import operator
import os
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph import kept_values
from trackpoint._graph.keys import OBJECT_GRAPH_KEY, unescape_local_name
from trackpoint._graph.node_bytes import split_nodes, variable_keys
from trackpoint._graph.serialize import layout_is_tracked
from trackpoint._tracking.base import Trackable, structure_epoch
from trackpoint._tracking.variables import VARIABLE_VALUE, Variable, take_restored
from trackpoint.errors import CheckpointError, DataLossError, InvalidArgumentError

__all__ = ["CheckpointPosition", "RestoreCoordinator", "RestoreReplay", "node_paths", "parse_graph", "read_object_graph",
           "read_object_graph_bytes"]

_log = logging.getLogger("trackpoint")
_restore_uids = itertools.count(1)
_MAX_NODES = 1 << 24
_BATCH_BYTES = 4 << 20
_MAX_PATH_CHARS = 512
_PLAIN_LOOKUP = Trackable._lookup_dependency
_NO_CHILDREN: dict[str, Trackable] = {}
_NODE_ID, _WANTED = operator.itemgetter(0), operator.itemgetter(2)  # of an _Assignment

# (node id, object, wanted, the object's update uid before the walk); wanted is a plain
# variable's key, or [(tensor name, key)].
_Assignment = tuple[int, Trackable, "str | list[tuple[str, str]]", int]


def parse_graph(raw: bytes, prefix: str, validate: bool = True) -> pb.TrackableObjectGraph:
    """Parse a serialized object graph; with ``validate``, check every node reference up front.

    A restore passes ``validate=False``: its coordinator checks each reference as it follows
    it, which saves a pass over every node of a large graph.
    """
    graph = pb.TrackableObjectGraph()
    try:
        graph.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError
        raise DataLossError(f"{prefix}: the object graph is not a valid TrackableObjectGraph: {exc}") from exc
    count = len(graph.nodes)
    if count == 0 or count > _MAX_NODES:
        raise DataLossError(f"{prefix}: the object graph has {count} nodes")
    if validate:
        for node_id, node in enumerate(graph.nodes):
            for child in node.children:
                _check_child(child.node_id, count, node_id, prefix)
            for slot in node.slot_variables:
                _check_slot(slot, count, node_id, prefix)
    return graph


def read_object_graph_bytes(reader: BundleReader) -> bytes | None:
    """The checkpoint's serialized object graph; None if it has none.

    Raises:
        InvalidArgumentError: The graph key holds something other than a scalar string.
    """
    if OBJECT_GRAPH_KEY not in reader:
        return None
    raw = reader.read(OBJECT_GRAPH_KEY)
    if not isinstance(raw, bytes):
        raise InvalidArgumentError(f"{reader.prefix}: {OBJECT_GRAPH_KEY} is not a scalar string")
    return raw


def read_object_graph(reader: BundleReader, validate: bool = True) -> pb.TrackableObjectGraph | None:
    """The checkpoint's object graph, parsed (see :func:`parse_graph`); None if it has none.

    Raises:
        InvalidArgumentError: The graph key holds something other than a scalar string.
        DataLossError: The graph is malformed.
    """
    raw = read_object_graph_bytes(reader)
    return None if raw is None else parse_graph(raw, reader.prefix, validate)


def _check_child(child_id: int, count: int, node_id: int, prefix: str) -> None:
    if not 0 <= child_id < count:
        raise DataLossError(f"{prefix}: node {node_id} names child node {child_id} of {count}")


def _check_slot(slot: pb.TrackableObjectGraph.TrackableObject.SlotVariableReference, count: int, node_id: int,
                prefix: str) -> None:
    if not (0 <= slot.original_variable_node_id < count and 0 <= slot.slot_variable_node_id < count):
        raise DataLossError(f"{prefix}: node {node_id} has a slot reference outside the graph")


def node_paths(graph: pb.TrackableObjectGraph) -> dict[int, str]:
    """Readable paths ``(root).model.dense.kernel``; slots as ``<opt>'s state 'm' for <var>``."""
    paths = {0: "(root)"}
    count = len(graph.nodes)
    queue = deque([0])
    while queue:
        node_id = queue.popleft()
        for child in graph.nodes[node_id].children:
            if child.node_id not in paths and 0 <= child.node_id < count:
                parent = paths[node_id]
                if len(parent) > _MAX_PATH_CHARS:  # a hostile chain must not cost quadratic memory
                    parent = parent[: _MAX_PATH_CHARS // 2] + "..."
                paths[child.node_id] = f"{parent}.{child.local_name[:_MAX_PATH_CHARS]}"
                queue.append(child.node_id)
    for node_id, node in enumerate(graph.nodes):
        for slot in node.slot_variables:
            if slot.slot_variable_node_id not in paths and 0 <= slot.slot_variable_node_id < count:
                paths[slot.slot_variable_node_id] = (
                    f"{paths.get(node_id, f'node {node_id}')}'s state '{slot.slot_name}' for "
                    f"{paths.get(slot.original_variable_node_id, f'node {slot.original_variable_node_id}')}"
                )
    for node_id in range(len(graph.nodes)):
        paths.setdefault(node_id, f"(unreachable node {node_id})")
    return paths


def _has_values(node: pb.TrackableObjectGraph.TrackableObject) -> bool:
    if node.HasField("has_checkpoint_values"):
        return node.has_checkpoint_values.value
    return bool(node.children or node.attributes or node.slot_variables or node.HasField("registered_saver"))


_NAMES: dict[str, str] = {}  # stored attribute name -> name; there are only a handful ("VARIABLE_VALUE", ...)


def _unescape(name: str) -> str:
    unescaped = _NAMES.get(name)
    if unescaped is None:
        unescaped = unescape_local_name(name)
        if len(_NAMES) < 4096:
            _NAMES[name] = unescaped
    return unescaped


@dataclass(frozen=True)
class RestoreReplay:
    """What a restore did, to do again without walking the graph.

    Restoring the same object graph into the same, unchanged objects binds the same nodes
    to the same objects, parks the same restore-on-create positions and assigns the same
    keys. So a later restore of a checkpoint whose serialized graph is identical (an
    evaluator or server picking up each new checkpoint of a training job, a job going back
    to its last good checkpoint) repeats those effects and only reads the values. It is made
    only from a walk that a replay repeats exactly (see :meth:`RestoreCoordinator.replay_plan`)
    and holds weak references, so it keeps no object alive.

    Attributes:
        epoch: The structure epoch of the walk; any change to any object's children since
            (see ``structure_changed``) makes the plan stale.
        graph: The serialized object graph it was made from.
        skip_slot_variables: The restore's option of that name.
        slot_owners: The nodes owning the graph's slot variables, which spares a replay
            the slot scan (its graph is the same).
        bound: Node id -> weak reference to its object, in walk order.
        value_ids: The node id of each object assigned, in order.
        value_keys: Its key, or ``[(tensor name, key)]``, parallel to ``value_ids`` (two
            lists rather than one of pairs: a pair per variable is an object per variable
            for the garbage collector to scan).
        stages: Where each walk began: the number of bindings, deferrals and values before it.
            A restore walks the root's subtree, then each attached dependency's; a replay
            keeps that order, which decides where slots wait for their optimizers.
        deferrals: ``(parent node id, local name, child node id)`` of each position parked
            on a live object for restore-on-create.
        deferred_slots: ``(optimizer node id, variable node id, slot node id, slot name)``
            of each slot that had to wait for its optimizer, in the stage that bound the
            variable (a later stage may bind the optimizer and resolve it).
        unused_attributes: Node id -> attribute names its object does not take.
    """

    epoch: int
    graph: bytes
    skip_slot_variables: bool
    slot_owners: list[int]
    bound: dict[int, weakref.ref[Trackable]]
    value_ids: list[int]
    value_keys: list[str | list[tuple[str, str]]]
    stages: list[tuple[int, int, int]]
    deferrals: list[tuple[int, str, int]]
    deferred_slots: list[tuple[int, int, int, str]]
    unused_attributes: dict[int, tuple[str, ...]]

    def applies_to(self, graph: bytes, skip_slot_variables: bool, root: Trackable) -> bool:
        """Whether this plan holds, now, for a restore of the serialized ``graph`` into ``root``.

        The root is compared too: a copy of a checkpoint object (``copy.deepcopy``) carries
        its plan along, whose references still point at the original's objects.
        """
        root_ref = self.bound.get(0)
        return (self.epoch == structure_epoch() and self.skip_slot_variables == skip_slot_variables
                and root_ref is not None and root_ref() is root and self.graph == graph)


class _Plan:
    """What one :meth:`RestoreCoordinator.restore` call is to do, gathered by its walks.

    The walks bind nodes and note here what to do; objects are changed only once every
    walk is over and the values were read and checked.

    Attributes:
        assignments: What each object found is to take, in walk order.
        deferrals: ``(object, local name, node id)``: a child the object does not have yet,
            to wait for on it (restore-on-create).
        new_slots: ``(optimizer, variable, slot node id, slot name)``: a slot the optimizer
            does not have yet, to ask it for once the objects found have their values.
        bound: The nodes bound here that were not bound before (named one by one rather
            than by where the coordinator's ``bound`` stood: objects created on other threads
            may be binding nodes meanwhile).
        rebound: ``(node id, reference)`` of nodes bound anew here, the object of that
            reference having died.
        undo: Calls putting back the slot bookkeeping the walks changed, in order.
    """

    __slots__ = ("assignments", "bound", "deferrals", "new_slots", "rebound", "undo")

    def __init__(self) -> None:
        self.assignments: list[_Assignment] = []
        self.bound: list[int] = []
        self.deferrals: list[tuple[Trackable, str, int]] = []
        self.new_slots: list[tuple[Trackable, Trackable, int, str]] = []
        self.rebound: list[tuple[int, weakref.ref[Trackable]]] = []
        self.undo: list[Callable[[], object]] = []


class RestoreCoordinator:
    """State of one ``restore()``; see the module docstring.

    The graph stays a protobuf message and each node is read when the walk reaches it.
    Copying it into Python lists up front cost a pass over every node, and left the
    lists for the garbage collector to scan for as long as the restore status lived.
    """

    def __init__(self, reader: BundleReader, graph: pb.TrackableObjectGraph, skip_slot_variables: bool = False,
                 slot_owners: Sequence[int] | None = None, raw_graph: bytes | None = None) -> None:
        """Set up a restore of ``graph`` from ``reader``.

        Args:
            reader: The checkpoint's bundle.
            graph: Its parsed object graph.
            skip_slot_variables: Leave optimizer slot variables alone.
            slot_owners: The nodes known to own all slot variables (see
                :func:`~trackpoint._graph.slot_scan.slot_owners`), which spares a pass over
                every node; None to look at every node.
            raw_graph: ``graph`` serialized, from which a walk reads plain variable nodes
                (see :mod:`~trackpoint._graph.node_bytes`); None to read every node
                through ``graph``.
        """
        self.reader = reader
        self.prefix = reader.prefix
        self.kept: dict[str, Any] = {}  # values read into memory before their files went (see kept_values)
        kept_values.register(self)
        self.graph = graph
        # Calls reading values right now (see reading()): the files are closed when the last ends.
        self._reads = 0
        self._reads_lock = threading.Lock()
        self._raw_graph = raw_graph
        self.nodes = graph.nodes
        self.node_count = len(self.nodes)
        self.restore_uid = next(_restore_uids)
        self.skip_slot_variables = skip_slot_variables
        # proto id -> weak reference to the bound object: a plain dict of weakref.ref, which
        # binds an object several times faster than a WeakValueDictionary's Python-level
        # bookkeeping (a keyed reference with a callback per item).
        self.bound: dict[int, weakref.ref[Trackable]] = {}
        self.matched_proto_ids: set[int] = set()
        self.unused_attributes: dict[int, list[str]] = {}
        self.slot_node_ids: set[int] = set()
        self.slot_restorations: dict[int, list[tuple[int, int, str]]] = {}
        self.deferred_slot_restorations: dict[int, list[tuple[Trackable, int, str]]] = {}
        self.expect_partial = False
        self.deferred_ids: set[int] = set()  # nodes parked on live objects for restore-on-create
        # For a RestoreReplay: cleared by anything a replay could not repeat; what was
        # assigned and what was parked for restore-on-create.
        self.replayable = True
        self.assigned_ids: list[int] = []
        self.assigned_keys: list[str | list[tuple[str, str]]] = []
        self.deferrals: list[tuple[int, str, int]] = []
        self.stages: list[tuple[int, int, int]] = []  # see RestoreReplay.stages
        self.slot_waits: list[tuple[int, int, int, str]] = []  # see RestoreReplay.deferred_slots
        self.slot_owners: list[int] = []  # see RestoreReplay.slot_owners
        nodes = self.nodes
        owners = enumerate(nodes) if slot_owners is None else ((i, nodes[i]) for i in slot_owners)
        for opt_id, node in owners:
            slots = node.slot_variables
            if not slots:
                continue
            self.slot_owners.append(opt_id)
            for slot in slots:
                _check_slot(slot, self.node_count, opt_id, self.prefix)
                self.slot_node_ids.add(slot.slot_variable_node_id)
                if not skip_slot_variables:
                    self.slot_restorations.setdefault(slot.original_variable_node_id, []).append(
                        (opt_id, slot.slot_variable_node_id, slot.slot_name))
        self._paths: dict[int, str] | None = None

    @functools.cached_property
    def real_prefix(self) -> str:
        """The prefix with links resolved, to recognise the files a save is about to remove (see kept_values)."""
        return os.path.realpath(self.prefix)

    @functools.cached_property
    def node_bytes(self) -> list[bytes]:
        """Each node's serialized bytes (see :mod:`~trackpoint._graph.node_bytes`), or an
        empty string for every node, which sends the walk to ``graph``."""
        raw, self._raw_graph = self._raw_graph, None
        nodes = None if raw is None else split_nodes(raw, self.node_count)
        return [b""] * self.node_count if nodes is None else nodes

    @property
    def paths(self) -> dict[int, str]:
        if self._paths is None:
            self._paths = node_paths(self.graph)
        return self._paths

    # -- the graph, one node at a time ------------------------------------------------

    def children(self, node_id: int) -> list[tuple[int, str]]:
        """``(child id, local name)`` of a node, each id checked to lie inside the graph."""
        count = self.node_count
        out = []
        for child in self.nodes[node_id].children:
            child_id = child.node_id
            if not 0 <= child_id < count:
                _check_child(child_id, count, node_id, self.prefix)
            out.append((child_id, child.local_name))
        return out

    def attributes(self, node_id: int) -> list[tuple[str, str, str]]:
        """``(tensor name, stored name, checkpoint key)`` of a node's values."""
        return [(_unescape(a.name), a.name, a.checkpoint_key) for a in self.nodes[node_id].attributes]

    # -- bound objects ------------------------------------------------------------------

    def bound_object(self, node_id: int) -> Trackable | None:
        ref = self.bound.get(node_id)
        return ref() if ref is not None else None

    def bound_objects(self) -> list[tuple[int, Trackable]]:
        """``(node id, object)`` for every binding whose object is still alive."""
        out = []
        for node_id, ref in self.bound.items():
            obj = ref()
            if obj is not None:
                out.append((node_id, obj))
        return out

    # -- values -------------------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Around a call that may read values: the restore call itself, or a restore-on-create.

        The checkpoint's files are open only inside. When the outermost such call ends they
        are closed (see :meth:`BundleReader.release_files`), so nothing stays open while the
        status lives or values wait for objects yet to be created; a later read reopens the
        files, checking that they are still the same. Counted under a lock: objects created on
        two threads may both be reading.
        """
        with self._reads_lock:
            self._reads += 1
        try:
            yield
        finally:
            with self._reads_lock:
                self._reads -= 1
                if self._reads == 0:
                    self.reader.release_files()

    def wanted(self, node_id: int, trackable: Trackable) -> list[tuple[str, str]]:
        """``(tensor name, checkpoint key)`` of the node's values that ``trackable`` takes (possibly none).

        Values the object does not take are recorded as unused attributes. (The walk names
        a leaf variable's value by its key alone, without calling this.)
        """
        if type(trackable) is not Variable:
            self.replayable = False  # its tensor names may change without a structure change
        live = trackable._checkpoint_tensor_names()
        wanted = []
        for name, stored_name, key in self.attributes(node_id):
            if name in live:
                wanted.append((name, key))
            else:
                self.unused_attributes.setdefault(node_id, []).append(stored_name)
        return wanted

    def restore(self, bindings: Sequence[tuple[int, Trackable]]) -> None:
        """Bind each ``(node id, object)`` in turn and walk below it, then carry out what the walks found.

        Nothing is changed until every walk is over and every value for the objects found
        was read (which verifies its checksum) and checked (see :meth:`_assign`): a value
        damaged, missing or of another dtype or shape raises with no object changed and the
        bindings made here undone, so a restore-on-create that fails still waits for the
        next object created in its place. Once the values are in, objects wait for the
        children they lack and optimizers are asked for the slots they lack: those are
        objects created later, whose values are checked as they arrive.
        """
        plan = _Plan()
        with self.reading():  # a restore-on-create reopens the files, and closes them after
            try:
                for node_id, trackable in bindings:
                    if self.replayable:
                        self.stages.append((len(self.bound), len(self.deferrals), len(self.assigned_ids)))
                    position = CheckpointPosition(self, node_id, plan)
                    if position.bind_object(trackable):
                        position._restore_descendants(trackable)
                self._assign(plan.assignments)
            except BaseException:
                self._undo(plan)
                raise
            self._finish(plan)

    def _assign(self, assignments: list[_Assignment]) -> None:
        """Read the values of gathered nodes, check each against its object, then hand them out.

        No object takes a value before all are read and every plain variable's value was
        checked against its dtype and shape (each as it arrives, while the next batch is
        read). The values of one restore are therefore in memory together, beside the values
        they replace, as in TF (which reads them in one op). Other objects check their tensors
        themselves, in ``_restore_from_tensors``: they take theirs first, in walk order (as
        TF restores Python state first), so that one refusing leaves every variable as it was.
        """
        if not assignments:
            return
        keys: list[str] = []
        for _, _, wanted, _ in assignments:
            if isinstance(wanted, str):
                keys.append(wanted)
            else:
                keys.extend(key for _, key in wanted)
        variables: list[Variable] = []
        arrays: list[Any] = []
        others = []
        with self._values(keys) as values:
            for node_id, trackable, wanted, _ in assignments:
                if isinstance(wanted, str) or (type(trackable) is Variable and len(wanted) == 1):
                    try:
                        arrays.append(trackable._check_restored(next(values)))  # type: ignore[attr-defined]
                    except InvalidArgumentError as exc:
                        raise self._refused(node_id, wanted, exc) from exc
                    variables.append(trackable)  # type: ignore[arg-type]
                else:
                    others.append((node_id, trackable, wanted, {name: next(values) for name, _ in wanted}))
        for node_id, trackable, wanted, tensors in others:
            try:
                trackable._restore_from_tensors(tensors)
            except InvalidArgumentError as exc:
                raise self._refused(node_id, wanted, exc) from exc
        take_restored(variables, arrays)

    @contextlib.contextmanager
    def _values(self, keys: list[str]) -> Iterator[Iterator[Any]]:
        """The values of ``keys`` in order, checksums verified, read batch by batch as they are
        taken (or kept in memory, see :mod:`kept_values`)."""
        kept = self.kept
        if kept and all(key in kept for key in keys):
            yield map(kept.__getitem__, keys)
        elif len(keys) == 1:
            # One tensor, the usual restore-on-create of a variable created on its own: read
            # alone, with the same checks, it skips planning batches for the whole of a
            # restore, which costs ten times the read.
            yield iter([self.reader.read(keys[0])])
        else:
            # Closed on a failure now rather than when the traceback goes: its read-ahead
            # thread must be done before the files close.
            with contextlib.closing(self.reader.read_batches(keys, _BATCH_BYTES)) as batches:  # type: ignore[type-var]
                yield itertools.chain.from_iterable(batches)

    def _refused(self, node_id: int, wanted: str | list[tuple[str, str]], exc: Exception) -> InvalidArgumentError:
        keys = wanted if isinstance(wanted, str) else ", ".join(key for _, key in wanted)
        return InvalidArgumentError(f"{self.prefix}: cannot restore checkpoint key {keys} into {self.paths[node_id]}: "
                                    f"{exc}")

    def _undo(self, plan: _Plan) -> None:
        """Take back what a :meth:`restore` (or :meth:`replay`) call that raised did to this
        restore's bookkeeping and to the objects' marks, as if it had not begun."""
        self.replayable = False
        for _, trackable, _, update_uid in plan.assignments:
            trackable._tp_update_uid = update_uid
        for node_id in plan.bound:
            self.bound.pop(node_id, None)
            self.unused_attributes.pop(node_id, None)
        self.matched_proto_ids.difference_update(plan.bound)
        self.bound.update(plan.rebound)
        for undo in reversed(plan.undo):
            undo()

    def _finish(self, plan: _Plan) -> None:
        """Once the objects found have their values: leave positions for the children they
        lack, then ask the optimizers for the slots they lack."""
        for trackable, local_name, child_id in plan.deferrals:
            trackable._defer_restore(local_name, CheckpointPosition(self, child_id))
            self.deferred_ids.add(child_id)
        for optimizer, variable, slot_id, slot_name in plan.new_slots:
            position = CheckpointPosition(self, slot_id)
            slot = optimizer._create_or_restore_slot_variable(position, variable, slot_name)  # type: ignore[attr-defined]
            if slot is not None:
                position.restore(slot)

    def replay(self, plan: RestoreReplay) -> bool:
        """Repeat what ``plan`` records (see :class:`RestoreReplay`); False, doing nothing, if
        one of its objects has died. Its values are assigned all or none, as by :meth:`restore`."""
        refs = list(plan.bound.values())
        found = [ref() for ref in refs]
        if any(obj is None for obj in found):  # by identity: `None in` would call objects' __eq__
            return False
        objects = cast(list[Trackable], found)
        self.replayable = False  # this restore's record is the plan itself
        node_ids = list(plan.bound)
        by_node = dict(zip(node_ids, objects))
        # Per node: its position in walk order, to tell which stage a recorded effect belongs to.
        order = dict(zip(node_ids, range(len(node_ids)))) if plan.deferred_slots or plan.unused_attributes else {}
        uid = self.restore_uid
        work = _Plan()
        ends = [*plan.stages[1:], (len(node_ids), len(plan.deferrals), len(plan.value_ids))]
        for (b0, d0, v0), (b1, d1, v1) in zip(plan.stages, ends):
            stage = node_ids[b0:b1]
            work.assignments.extend((node_id, by_node[node_id], wanted, by_node[node_id]._tp_update_uid)
                                    for node_id, wanted in zip(plan.value_ids[v0:v1], plan.value_keys[v0:v1]))
            self.bound.update(zip(stage, refs[b0:b1]))
            work.bound.extend(stage)
            self.matched_proto_ids.update(stage)
            for obj in objects[b0:b1]:
                obj._tp_update_uid = uid
            if self.slot_restorations:  # a bound variable's slots were resolved (or wait below)
                for node_id in stage:
                    self.slot_restorations.pop(node_id, None)
            for opt_id, var_id, slot_id, slot_name in plan.deferred_slots:
                if b0 <= order[var_id] < b1:
                    self.deferred_slot_restorations.setdefault(opt_id, []).append((by_node[var_id], slot_id, slot_name))
            if self.deferred_slot_restorations:  # an optimizer bound now took what waited for it
                for node_id in stage:
                    self.deferred_slot_restorations.pop(node_id, None)
            for node_id, names in plan.unused_attributes.items():
                if b0 <= order[node_id] < b1:
                    self.unused_attributes[node_id] = list(names)
            work.deferrals.extend((by_node[parent_id], local_name, child_id)
                                  for parent_id, local_name, child_id in plan.deferrals[d0:d1])
        try:
            self._assign(work.assignments)
        except BaseException:
            self._undo(work)
            raise
        self._finish(work)
        return True

    def replay_plan(self, graph: bytes, epoch: int) -> RestoreReplay | None:
        """A :class:`RestoreReplay` of this restore, if a replay would repeat it exactly.

        That takes a walk that bound every object it met and asked no object other than a
        plain variable which tensors it takes (another may answer differently next time),
        and objects whose children and slots are all reported to the structure epoch, which
        has not moved since the walk began: no object was created or replaced meanwhile.
        """
        # The record closes here (every append to it checks ``replayable``): what this
        # coordinator does later, restore-on-create, belongs to no plan.
        replayable, self.replayable = self.replayable, False
        if not replayable or structure_epoch() != epoch:
            return None
        objects = [ref() for ref in self.bound.values()]
        if any(obj is None for obj in objects) or not layout_is_tracked(cast(list[Trackable], objects), lookups=True):
            return None
        return RestoreReplay(epoch, graph, self.skip_slot_variables, self.slot_owners, dict(self.bound),
                             self.assigned_ids, self.assigned_keys, self.stages, self.deferrals, self.slot_waits,
                             {node_id: tuple(names) for node_id, names in self.unused_attributes.items()})

    def read_tensor(self, key: str, node_id: int) -> Any:
        kept = self.kept.get(key)
        if kept is not None:
            return kept
        try:
            return self.reader.read(key)
        except CheckpointError as exc:
            raise type(exc)(f"{exc} (restoring {self.paths[node_id]})") from exc

    def keep_waiting_values(self) -> None:
        """Read into memory every value no object has taken yet (see :mod:`kept_values`).

        A checkpoint that can no longer be read as it was is left alone: the read that needs
        a value raises then, naming the file and key, as it would have anyway.
        """
        keys = [a.checkpoint_key for node_id in self.unrestored_values() for a in self.nodes[node_id].attributes
                if a.checkpoint_key not in self.kept]
        if not keys:
            return
        try:
            with self.reading(), self._values(keys) as read:
                values = list(read)
        except CheckpointError as exc:
            _log.warning("%s: could not keep the values waiting for objects before the checkpoint's files go: %s",
                         self.prefix, exc)
            return
        self.kept = {**self.kept, **dict(zip(keys, values))}

    def unrestored_values(self) -> list[int]:
        """Checkpoint nodes holding values that no live object has received."""
        # matched_proto_ids, not the bound objects: the answer must not change when the
        # restored objects are garbage-collected (e.g. at interpreter exit). Only unmatched
        # nodes are looked at: after a complete restore, none.
        matched, nodes = self.matched_proto_ids, self.nodes
        if len(matched) == self.node_count:
            return []
        skipped = self.slot_node_ids if self.skip_slot_variables else ()
        return [i for i in range(self.node_count) if i not in matched and i not in skipped and nodes[i].attributes]

    def partial_restore_warning(self) -> str | None:
        """What TF warns about when a restore is deleted before all its values found a home.

        Two kinds, as in TF: checkpoint nodes with values that no object was bound to, and
        attributes of bound nodes that their object does not take (a variable's value
        restored into an object without tensors). None when there is neither.
        """
        missing = self.unrestored_values()
        unused = list(self.unused_attributes.items())
        if not missing and not unused:
            return None
        paths = self.paths
        lines = [(f"{self.prefix}: a restore is being deleted with unrestored values. Call expect_partial() on the "
                  "restore status to silence this warning.")]
        _list_some(lines, f"{len(missing)} checkpoint value(s) were never restored (no object matched them):",
                   [paths[i] for i in missing[:10]], len(missing))
        _list_some(lines, f"{len(unused)} restored object(s) did not take attribute(s) the checkpoint holds for them:",
                   [f"{paths[i]}: {', '.join(names)}" for i, names in unused[:10]], len(unused))
        return "\n".join(lines)

    def __del__(self) -> None:
        if self.expect_partial:
            return
        try:
            message = self.partial_restore_warning()
        except Exception:  # noqa: BLE001 - at interpreter exit, modules may be half torn down
            return
        if message is not None:
            warnings.warn(message, UserWarning, stacklevel=2)


def _list_some(lines: list[str], heading: str, shown: list[str], total: int) -> None:
    """Append ``heading`` and the first items, indented, with a count of the rest (nothing when ``total`` is 0)."""
    if total:
        lines.append(heading)
        lines.extend(f"  {item}" for item in shown)
        if total > len(shown):
            lines.append(f"  ... and {total - len(shown)} more")


class CheckpointPosition:
    """One node of the checkpoint graph, in the context of one restore.

    Attributes:
        coordinator: The restore.
        proto_id: The node.
        plan: What the :meth:`RestoreCoordinator.restore` call walking this node gathers;
            None for a position waiting to be restored.
    """

    __slots__ = ("coordinator", "plan", "proto_id")

    def __init__(self, coordinator: RestoreCoordinator, proto_id: int, plan: _Plan | None = None) -> None:
        self.coordinator = coordinator
        self.proto_id = proto_id
        self.plan = plan

    @property
    def restore_uid(self) -> int:
        return self.coordinator.restore_uid

    def is_simple_variable(self) -> bool:
        attributes = self.coordinator.attributes(self.proto_id)
        return (len(attributes) == 1 and attributes[0][1] == VARIABLE_VALUE
                and not self.coordinator.nodes[self.proto_id].children)

    def simple_variable_value(self) -> Any:
        # Not marked matched here: the object made from this value is bound when tracked
        # (restore_pending), and until then, or if making it fails, the node still waits.
        coordinator = self.coordinator
        with coordinator.reading():
            return coordinator.read_tensor(coordinator.attributes(self.proto_id)[0][2], self.proto_id)

    def bind_object(self, trackable: Trackable) -> bool:
        """Bind this node to ``trackable``; True if that is a new binding."""
        coordinator = self.coordinator
        coordinator.matched_proto_ids.add(self.proto_id)
        ref = coordinator.bound.get(self.proto_id)
        current = ref() if ref is not None else None
        if current is None:
            if self.plan is not None:
                if ref is None:
                    self.plan.bound.append(self.proto_id)
                else:
                    self.plan.rebound.append((self.proto_id, ref))
            coordinator.bound[self.proto_id] = weakref.ref(trackable)
            return True
        if current is not trackable:
            coordinator.replayable = False
            _log.warning("Inconsistent references when restoring %s: %s was already bound to another object",
                         coordinator.prefix, coordinator.paths[self.proto_id])
        return False

    def restore(self, trackable: Trackable) -> None:
        """Give ``trackable`` and its descendants their values, all or none (see
        :meth:`RestoreCoordinator.restore`)."""
        self.coordinator.restore([(self.proto_id, trackable)])

    def _restore_descendants(self, trackable: Trackable) -> None:
        """Bind every node below this one that has a live counterpart; plan what each is to take.

        Like TF in eager mode: walk and bind first, then read every value in batches
        (neighbouring tensors in one read, large ones in parallel) and assign them (see
        :meth:`RestoreCoordinator.restore`). The loop runs once per object of the model, so
        binding is inlined, leaves are gathered where their parent is walked, and positions
        are built only for slots.
        """
        coordinator = self.coordinator
        plan = cast(_Plan, self.plan)  # a walk is part of a RestoreCoordinator.restore call
        nodes = coordinator.nodes
        count = coordinator.node_count
        bound = coordinator.bound
        matched = coordinator.matched_proto_ids
        slot_restorations = coordinator.slot_restorations
        deferred_slots = coordinator.deferred_slot_restorations
        uid = coordinator.restore_uid
        wanted_of = coordinator.wanted
        make_ref = weakref.ref
        node_bytes = coordinator.node_bytes
        queue: deque[tuple[int, Trackable]] = deque([(self.proto_id, trackable)])
        pending = plan.assignments
        first = len(pending)
        new_bound = plan.bound
        first_bound = len(new_bound)
        while queue:
            node_id, obj = queue.popleft()
            node = nodes[node_id]
            update_uid = obj._tp_update_uid
            if uid > update_uid:  # else a later restore already assigned it
                attributes = node.attributes
                if attributes:
                    wanted = wanted_of(node_id, obj)
                    if wanted:
                        pending.append((node_id, obj, wanted, update_uid))
                obj._tp_update_uid = uid
            else:
                coordinator.replayable = False
            children = node.children
            if children:
                if type(obj)._lookup_dependency is _PLAIN_LOOKUP:
                    # Its children dict's own get, which Trackable's lookup calls: a method
                    # call per child (a model's every variable) costs more than the lookup.
                    state = obj._tp
                    lookup = state["children"].get if state is not None else _NO_CHILDREN.get
                else:
                    lookup = obj._lookup_dependency
                # Once per node, not per child: slot_restorations only shrinks, and slots wait
                # in deferred_slots only when taken from it, so empty both stay empty.
                slots_pending = bool(slot_restorations or deferred_slots)
                # Ids and names in one pass over the messages, then the keys of the children
                # that are plain variables in one pass over their bytes: cheaper than both per child.
                named = [(child.node_id, child.local_name) for child in children]
                ids = [child_id for child_id, _ in named]
                if min(ids) < 0 or max(ids) >= count:
                    for child_id in ids:
                        _check_child(child_id, count, node_id, coordinator.prefix)
                for (child_id, local_name), key in zip(named, variable_keys(node_bytes, ids)):
                    ref = bound.get(child_id)
                    if ref is not None:
                        if ref() is not None:
                            continue  # reached by another path
                        coordinator.replayable = False  # a rebinding keeps the old place in walk order
                    local = lookup(local_name)
                    if local is None:
                        if _has_values(nodes[child_id]):
                            plan.deferrals.append((obj, local_name, child_id))
                            if coordinator.replayable:
                                coordinator.deferrals.append((node_id, local_name, child_id))
                        continue
                    if ref is None:
                        new_bound.append(child_id)  # and matched, below
                    else:
                        plan.rebound.append((child_id, ref))  # matched already
                    bound[child_id] = make_ref(local)
                    if (key is None and nodes[child_id].children) or (
                            slots_pending and (child_id in slot_restorations or child_id in deferred_slots)):
                        queue.append((child_id, local))
                    elif uid > (update_uid := local._tp_update_uid):
                        # A leaf: gathered here rather than queued, and a plain variable's
                        # value named by its key alone (measured: collecting leaves to gather
                        # them in one place cost 15% of a restore).
                        local._tp_update_uid = uid
                        if key is not None and type(local) is Variable:
                            pending.append((child_id, local, key, update_uid))
                        elif key is not None or nodes[child_id].attributes:
                            wanted = wanted_of(child_id, local)
                            if wanted:
                                pending.append((child_id, local, wanted, update_uid))
                    else:
                        coordinator.replayable = False
                del named, ids  # not held through the reads (a large list's are megabytes)
            if slot_restorations or deferred_slots:
                queue.extend(CheckpointPosition(coordinator, node_id, plan)._slots_to_restore(obj))
        matched.update(itertools.islice(new_bound, first_bound, None))  # one call, not one a child
        if coordinator.replayable and len(pending) > first:
            coordinator.assigned_ids.extend(map(_NODE_ID, itertools.islice(pending, first, None)))
            coordinator.assigned_keys.extend(map(_WANTED, itertools.islice(pending, first, None)))

    def _slots_to_restore(self, trackable: Trackable) -> list[tuple[int, Trackable]]:
        """``(slot node id, slot)`` of the existing slots to walk on to from this node (see :meth:`_slot`)."""
        coordinator = self.coordinator
        plan = cast(_Plan, self.plan)
        waiting = coordinator.deferred_slot_restorations
        out = []
        # This node is an optimizer bound after some of its variables.
        entries = waiting.pop(self.proto_id, None)
        if entries:
            plan.undo.append(functools.partial(waiting.__setitem__, self.proto_id, entries))
            for variable, slot_id, slot_name in entries:
                out.extend(self._slot(trackable, variable, slot_id, slot_name))
        # This node is a variable with slots.
        slots = coordinator.slot_restorations.pop(self.proto_id, None)
        if slots:
            plan.undo.append(functools.partial(coordinator.slot_restorations.__setitem__, self.proto_id, slots))
            for opt_id, slot_id, slot_name in slots:
                optimizer = coordinator.bound_object(opt_id)
                if optimizer is None:
                    entries = waiting.setdefault(opt_id, [])
                    entries.append((trackable, slot_id, slot_name))
                    plan.undo.append(entries.pop)
                    if coordinator.replayable:
                        coordinator.slot_waits.append((opt_id, self.proto_id, slot_id, slot_name))
                else:
                    out.extend(self._slot(optimizer, trackable, slot_id, slot_name))
        return out

    def _slot(self, optimizer: Trackable, variable: Trackable, slot_id: int,
              slot_name: str) -> list[tuple[int, Trackable]]:
        """The slot to bind and walk on to, if the optimizer has it already (``get_slot``).

        One it lacks is planned instead: its optimizer is asked for it
        (``_create_or_restore_slot_variable``) once the objects found have their values, so
        that a restore that fails makes no slot.
        """
        if getattr(optimizer, "_create_or_restore_slot_variable", None) is None:
            return []
        coordinator = self.coordinator
        get_slot = getattr(optimizer, "get_slot", None)
        slot = get_slot(variable, slot_name) if get_slot is not None else None
        if slot is None:
            coordinator.replayable = False  # what the optimizer does is its own: a replay could not repeat it
            cast(_Plan, self.plan).new_slots.append((optimizer, variable, slot_id, slot_name))
            return []
        return [(slot_id, slot)] if CheckpointPosition(coordinator, slot_id, self.plan).bind_object(slot) else []
