"""One restore: the checkpoint's graph and reader, which nodes are bound to which objects.

A :class:`RestoreCoordinator` is made per ``restore()``. Its :meth:`~RestoreCoordinator.restore`
binds nodes to objects and walks below them (:mod:`~trackpoint._graph.walk`), gathering a
plan; :meth:`~RestoreCoordinator.execute` carries the plan out only once every value it
assigns was read and checked, so a restore changes all the objects it found or none. Slot
variables are restored once both their variable and their optimizer are bound, in either
order. The coordinator lives as long as the restore's status, for restore-on-create and the
status's questions (:mod:`~trackpoint._graph.status_queries`). The assignment itself is
:mod:`~trackpoint._graph.assign`'s; whether the bindings cover every live object,
:mod:`~trackpoint._graph.coverage`'s.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph import kept_values
from trackpoint._graph.assign import assign, copy_in_place
from trackpoint._graph.coverage import Coverage
from trackpoint._graph.node_bytes import split_nodes
from trackpoint._graph.object_graph import check_child, check_slot, unescape
from trackpoint._graph.plan import RestorePlan, Wanted, new_restore_uid
from trackpoint._graph.restore_record import NOT_RECORDING, Recorder
from trackpoint._graph.status_queries import RestoreQueries
from trackpoint._graph.values import CheckpointValues
from trackpoint._graph.walk import CheckpointPosition
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import SlotOwner
from trackpoint.errors import CheckpointError, InvalidArgumentError

__all__ = ["RestoreCoordinator"]

_log = logging.getLogger("trackpoint")


class RestoreCoordinator(RestoreQueries):
    """State of one ``restore()``; see the module docstring.

    The graph stays a protobuf message and each node is read when the walk reaches it,
    so a restore makes no Python object per node beyond those it binds.
    """

    def __init__(
        self,
        reader: BundleReader,
        graph: pb.TrackableObjectGraph,
        skip_slot_variables: bool = False,
        slot_owners: Sequence[int] | None = None,
        raw_graph: bytes | None = None,
    ) -> None:
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
        self.values = CheckpointValues(reader)
        self.prefix = reader.prefix
        # Called once a plan's values are read, before any object takes one (see assign).
        self.before_take: Callable[[], None] | None = None
        kept_values.register(self)
        self.graph = graph
        self._raw_graph = raw_graph
        self.nodes = graph.nodes
        self.node_count = len(self.nodes)
        self.restore_uid = new_restore_uid()
        self.skip_slot_variables = skip_slot_variables
        # proto id -> weak reference to the bound object: a plain dict of weakref.ref, which
        # binds an object several times faster than a WeakValueDictionary's Python-level
        # bookkeeping (a keyed reference with a callback per item).
        self.bound: dict[int, weakref.ref[Trackable]] = {}
        # proto id -> the other objects that took a node's values, found under other names of
        # it than the bound object (see walk._add_alias): a tied weight loaded untied.
        self.aliases: dict[int, list[weakref.ref[Trackable]]] = {}
        # One flag a node rather than a set of ids: a set costs about 136 bytes a variable
        # (an int and a hash slot each), this one byte (see PERFORMANCE.md, "The match check").
        self.matched = np.zeros(self.node_count, bool)
        self.unused_attributes: dict[int, list[str]] = {}
        self.slot_node_ids: set[int] = set()
        self.slot_restorations: dict[int, list[tuple[int, int, str]]] = {}
        self.deferred_slot_restorations: dict[int, list[tuple[Trackable, int, str]]] = {}
        self.expect_partial = False
        # Whether the walks bound every live object: spares assert_existing_objects_matched its
        # walk of the live objects (see coverage).
        self.coverage = Coverage()
        self.deferred_ids: set[int] = set()  # nodes parked on live objects for restore-on-create
        self.slot_owners: list[int] = []  # see RestoreRecord.slot_owners
        nodes = self.nodes
        owners = enumerate(nodes) if slot_owners is None else ((i, nodes[i]) for i in slot_owners)
        for opt_id, node in owners:
            slots = node.slot_variables
            if not slots:
                continue
            self.slot_owners.append(opt_id)
            for slot in slots:
                check_slot(slot, self.node_count, opt_id, self.prefix)
                self.slot_node_ids.add(slot.slot_variable_node_id)
                if not skip_slot_variables:
                    self.slot_restorations.setdefault(slot.original_variable_node_id, []).append(
                        (opt_id, slot.slot_variable_node_id, slot.slot_name)
                    )

    @property
    def real_prefix(self) -> str:
        """The prefix with links resolved (see kept_values)."""
        return self.values.real_prefix

    @functools.cached_property
    def node_bytes(self) -> list[bytes]:
        """Each node's serialized bytes (see :mod:`~trackpoint._graph.node_bytes`), or an
        empty string for every node, which sends the walk to ``graph``."""
        raw, self._raw_graph = self._raw_graph, None
        nodes = None if raw is None else split_nodes(raw, self.node_count)
        return [b""] * self.node_count if nodes is None else nodes

    # -- the graph, one node at a time ------------------------------------------------

    def children(self, node_id: int) -> list[tuple[int, str]]:
        """``(child id, local name)`` of a node, each id checked to lie inside the graph."""
        count = self.node_count
        out = []
        for child in self.nodes[node_id].children:
            child_id = child.node_id
            if not 0 <= child_id < count:
                check_child(child_id, count, node_id, self.prefix)
            out.append((child_id, child.local_name))
        return out

    def attributes(self, node_id: int) -> list[tuple[str, str, str]]:
        """``(tensor name, stored name, checkpoint key)`` of a node's values."""
        return [(unescape(a.name), a.name, a.checkpoint_key) for a in self.nodes[node_id].attributes]

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

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """Around a call that may read values (see :meth:`CheckpointValues.reading`)."""
        return self.values.reading()

    def wanted(self, node_id: int, trackable: Trackable, recorder: Recorder) -> list[tuple[str, str]]:
        """``(tensor name, checkpoint key)`` of the node's values that ``trackable`` takes (possibly none).

        Values the object does not take are recorded as unused attributes. (The walk names
        a leaf variable's value by its key alone, without calling this.)
        """
        if not type(trackable)._tp_takes_value:  # its tensor names may change without a structure change
            recorder.refuse(f"node {node_id} is a {type(trackable).__name__}, which names its own tensors")
        live = trackable._checkpoint_tensor_names()
        wanted = []
        for name, stored_name, key in self.attributes(node_id):
            if name in live:
                wanted.append((name, key))
            else:
                self.unused_attributes.setdefault(node_id, []).append(stored_name)
        return wanted

    def restore(self, bindings: Sequence[tuple[int, Trackable]], recorder: Recorder = NOT_RECORDING) -> None:
        """Bind each ``(node id, object)`` in turn and walk below it, then carry out what the walks found.

        Nothing is changed until every walk is over and every value for the objects found
        was read (which verifies its checksum) and checked (see :meth:`_assign`): a value
        damaged, missing or of another dtype or shape raises with no object changed and the
        bindings made here undone, so a restore-on-create that fails still waits for the
        next object created in its place. Once the values are in, objects wait for the
        children they lack and optimizers are asked for the slots they lack: those are
        objects created later, whose values are checked as they arrive.

        Args:
            bindings: ``(node id, object)`` to bind and walk below, in order.
            recorder: Takes down what a repeat of this restore would need (see
                :mod:`~trackpoint._graph.restore_record`).
        """
        self.coverage.unsettle()  # a walk after the restore (restore-on-create): structure changed
        plan = RestorePlan(recorder)
        with self.reading():  # a restore-on-create reopens the files, and closes them after
            try:
                for node_id, trackable in bindings:
                    recorder.stage(len(self.bound))
                    position = CheckpointPosition(self, node_id, plan)
                    if position.bind_object(trackable):
                        position.walk(trackable)
            except BaseException:
                self._undo(plan)
                raise
            self.execute(plan)

    def new_plan(self) -> RestorePlan:
        """An empty plan, for a repeat to fill (see :func:`~trackpoint._graph.restore_record.replay`)."""
        return RestorePlan()

    def bind_stage(
        self,
        plan: RestorePlan,
        node_ids: Sequence[int],
        refs: Sequence[weakref.ref[Trackable]],
        objects: Sequence[Trackable],
    ) -> None:
        """Bind ``node_ids`` to the objects of ``refs`` as a walk would have, noted in ``plan``;
        a bound variable's slots are resolved (or wait, as the repeat says)."""
        self.bound.update(zip(node_ids, refs))
        plan.bound.extend(node_ids)
        self.matched[node_ids] = True
        uid = self.restore_uid
        for obj in objects:
            obj._tp_update_uid = uid
        if self.slot_restorations:
            for node_id in node_ids:
                self.slot_restorations.pop(node_id, None)

    def take_waiting_slots(self, node_ids: Sequence[int]) -> None:
        """The optimizers bound at ``node_ids`` took the slots that waited for them."""
        if self.deferred_slot_restorations:
            for node_id in node_ids:
                self.deferred_slot_restorations.pop(node_id, None)

    def execute(self, plan: RestorePlan) -> None:
        """Carry out what the walks (or a repeat) planned: read and check every value, hand
        them out, then leave what waits; on a failure, nothing is changed and the plan's
        bindings are undone."""
        with self.reading():
            try:
                # Once assign has returned: nothing of its frame holds a destination any more.
                for work in assign(self.values, plan.assignments, self._refused, self.before_take):
                    copy_in_place(*work)
            except BaseException:
                self._undo(plan)
                raise
            self._finish(plan)

    def _refused(self, node_id: int, wanted: Wanted, exc: Exception) -> InvalidArgumentError:
        keys = wanted if isinstance(wanted, str) else ", ".join(key for _, key in wanted)
        return InvalidArgumentError(
            f"{self.prefix}: cannot restore checkpoint key {keys} into {self.paths[node_id]}: {exc}",
            path=self.prefix,
            key=keys,
        )

    def _undo(self, plan: RestorePlan) -> None:
        """Take back what a :meth:`restore` (or a repeat) call that raised did to this
        restore's bookkeeping and to the objects' marks, as if it had not begun."""
        plan.recorder.refuse("the restore failed")
        for _, trackable, _, update_uid in plan.assignments:
            trackable._tp_update_uid = update_uid
        for node_id in plan.bound:
            self.bound.pop(node_id, None)
            self.unused_attributes.pop(node_id, None)
        self.matched[plan.bound] = False
        self.bound.update(plan.rebound)
        for undo in reversed(plan.undo):
            undo()

    def _finish(self, plan: RestorePlan) -> None:
        """Once the objects found have their values: leave positions for the children they
        lack, then ask the optimizers for the slots they lack."""
        for trackable, local_name, child_id in plan.deferrals:
            trackable._defer_restore(local_name, CheckpointPosition(self, child_id))
            self.deferred_ids.add(child_id)
        for optimizer, variable, slot_id, slot_name in plan.new_slots:
            position = CheckpointPosition(self, slot_id)
            slot = cast(SlotOwner, optimizer)._create_or_restore_slot_variable(position, variable, slot_name)
            if slot is not None:
                position.restore(slot)

    def read_tensor(self, key: str, node_id: int, out: np.ndarray | None = None) -> Any:
        try:
            return self.values.one(key, out)
        except CheckpointError as exc:
            raise type(exc)(
                f"{exc} (restoring {self.paths[node_id]})", path=exc.path or self.prefix, key=exc.key or key
            ) from exc

    def warn_inconsistent(self, node_id: int) -> None:
        """A node reached again, with another object than the one bound to it (see walk._add_alias)."""
        _log.warning(
            "Inconsistent references when restoring %s: %s is one object in the checkpoint, reached under "
            "several names, but more than one object here; each takes its values",
            self.prefix,
            self.paths[node_id],
        )
