"""The walk of a restore: binding checkpoint nodes to live objects and planning what each takes.

A :class:`CheckpointPosition` is one node of the checkpoint graph in one restore. Walking
below it binds each node that has a live counterpart and gathers a
:class:`~trackpoint._graph.plan.RestorePlan`:
the values to assign, the children to wait for on their objects (restore-on-create), the
slots to ask optimizers for. Nothing is changed by the walk but the bindings, which the
coordinator undoes if the restore fails (see ``RestoreCoordinator.restore``). Events a
repeat of the restore could not reproduce are reported to the plan's recorder, each with
its reason (see :mod:`~trackpoint._graph.restore_record`).
"""

from __future__ import annotations

import functools
import itertools
import operator
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from trackpoint._graph.live import PLAIN_CHILDREN, is_leaf, tracked_children
from trackpoint._graph.node_bytes import variable_keys
from trackpoint._graph.object_graph import check_child, has_values
from trackpoint._graph.plan import RestorePlan
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import VARIABLE_VALUE

if TYPE_CHECKING:
    from trackpoint._graph.coordinator import RestoreCoordinator

__all__ = ["CheckpointPosition"]

_PLAIN_LOOKUP = Trackable._lookup_dependency
_NO_CHILDREN: dict[str, Trackable] = {}
_NODE_ID, _WANTED = operator.itemgetter(0), operator.itemgetter(2)  # of an Assignment


def _add_alias(coordinator: RestoreCoordinator, plan: RestorePlan, node_id: int, obj: Trackable) -> bool:
    """Note ``obj`` as a second object of ``node_id``, which is bound to another; True when it
    is new, and so is to be walked (given the node's values and walked below) as a binding is.

    One node of the checkpoint reached under two names where the live objects at those names
    are two: a weight tied when saved, loaded into a model that does not tie it, or a module
    saved under two attributes loaded into two modules. Each name takes the stored values
    (TF gives them to the first object only and logs a warning: the second keeps its initial
    values). The status still refuses the match, as TF's does, naming both objects (see
    ``CheckpointLoadStatus.report().split``): they will change apart from now on.
    """
    aliases = coordinator.aliases.setdefault(node_id, [])
    if any(ref() is obj for ref in aliases):
        return False
    aliases.append(weakref.ref(obj))
    plan.undo.append(aliases.pop)
    # A repeat binds by node alone; and the walk of the live objects, not the bindings, is
    # what tells whether every live object was matched (see coverage).
    plan.recorder.refuse(f"node {node_id} was reached again, with another object")
    coordinator.coverage.decline(f"node {node_id} was reached again, with another object")
    coordinator.warn_inconsistent(node_id)
    return True


def _lookup_of(obj: Trackable) -> Callable[[str], Trackable | None]:
    """``obj._lookup_dependency``, or for ``Trackable``'s own its children dict's ``get``, which that
    lookup calls: a method call per child (a model's every variable) costs more than the lookup."""
    if type(obj)._lookup_dependency is _PLAIN_LOOKUP:
        state = obj._tp
        return state["children"].get if state is not None else _NO_CHILDREN.get
    return obj._lookup_dependency


def _unseen_children(obj: Trackable) -> bool:
    """Whether ``obj``, which the walk does not expand, may have children: it has tracked ones,
    or computes its own."""
    children = tracked_children(obj)
    return children is None or bool(children)


class CheckpointPosition:
    """One node of the checkpoint graph, in the context of one restore.

    Attributes:
        coordinator: The restore.
        node_id: The node.
        plan: What the ``RestoreCoordinator.restore`` call walking this node gathers;
            None for a position waiting to be restored.
    """

    __slots__ = ("coordinator", "node_id", "plan")

    def __init__(self, coordinator: RestoreCoordinator, node_id: int, plan: RestorePlan | None = None) -> None:
        self.coordinator = coordinator
        self.node_id = node_id
        self.plan = plan

    @property
    def restore_uid(self) -> int:
        return self.coordinator.restore_uid

    def is_simple_variable(self) -> bool:
        attributes = self.coordinator.attributes(self.node_id)
        return (
            len(attributes) == 1
            and attributes[0][1] == VARIABLE_VALUE
            and not self.coordinator.nodes[self.node_id].children
        )

    def simple_variable_spec(self) -> tuple[tuple[int, ...], np.dtype] | None:
        """Shape and numpy dtype of this simple variable's value, from the index alone (no data
        is read), so that its new owner can allocate the memory the value is then read into
        (:meth:`simple_variable_value` with ``out``); None for a string value."""
        coordinator = self.coordinator
        with coordinator.reading():
            return coordinator.values.spec(coordinator.attributes(self.node_id)[0][2])

    def simple_variable_value(self, out: np.ndarray | None = None) -> Any:
        """This simple variable's value, checksum verified: a new array, or read straight into
        ``out`` (C-contiguous, writable, of :meth:`simple_variable_spec`'s dtype and shape;
        undefined after a failed read) and returned."""
        # Not marked matched here: the object made from this value is bound when tracked
        # (restore_pending), and until then, or if making it fails, the node still waits.
        coordinator = self.coordinator
        with coordinator.reading():
            value = coordinator.read_tensor(coordinator.attributes(self.node_id)[0][2], self.node_id, out)
        if out is None and isinstance(value, np.ndarray):
            # Read-only: a variable made from it takes it as it is, with no copy (see infer_value).
            value.flags.writeable = False
        return value

    def mark_restored(self, trackable: Trackable) -> None:
        """Note that ``trackable`` was made from this node's value: this restore does not assign it again."""
        trackable._tp_update_uid = self.coordinator.restore_uid

    def bind_object(self, trackable: Trackable) -> bool:
        """Bind this node to ``trackable``; True if that is a new binding (or a new second
        object of a node bound to another, see :func:`_add_alias`), to be walked."""
        coordinator = self.coordinator
        coordinator.matched[self.node_id] = True
        ref = coordinator.bound.get(self.node_id)
        current = ref() if ref is not None else None
        if current is None:
            if self.plan is not None:
                if ref is None:
                    self.plan.bound.append(self.node_id)
                else:
                    self.plan.rebound.append((self.node_id, ref))
            coordinator.bound[self.node_id] = weakref.ref(trackable)
            return True
        if current is trackable or self.plan is None:
            return False
        # Another object at another name of the node: it takes the values too (see _add_alias).
        return _add_alias(coordinator, self.plan, self.node_id, trackable)

    def restore(self, trackable: Trackable) -> None:
        """Give ``trackable`` and its descendants their values, all or none (see
        ``RestoreCoordinator.restore``)."""
        self.coordinator.restore([(self.node_id, trackable)])

    def walk(self, trackable: Trackable) -> None:
        """Bind every node below this one that has a live counterpart; plan what each is to take.

        Like TF in eager mode: walk and bind first, then read every value in batches and
        assign them (see ``RestoreCoordinator.execute``). Leaves are gathered where their
        parent is walked, and positions are built only for slots (see PERFORMANCE.md).
        """
        coordinator = self.coordinator
        plan = cast(RestorePlan, self.plan)  # a walk is part of a RestoreCoordinator.restore call
        recorder = plan.recorder
        nodes = coordinator.nodes
        uid = coordinator.restore_uid
        queue: deque[tuple[int, Trackable]] = deque([(self.node_id, trackable)])
        pending = plan.assignments
        first = len(pending)
        first_bound = len(plan.bound)
        while queue:
            node_id, obj = queue.popleft()
            node = nodes[node_id]
            update_uid = obj._tp_update_uid
            if uid > update_uid:  # else a later restore already assigned it
                if node.attributes:
                    wanted = coordinator.wanted(node_id, obj, recorder)
                    if wanted:
                        pending.append((node_id, obj, wanted, update_uid))
                obj._tp_update_uid = uid
            else:
                recorder.refuse(f"node {node_id}'s object was assigned by a later restore")
            if node.children:
                self._bind_children(node_id, obj, node.children, queue)
            elif coordinator.coverage.reason is None and not is_leaf(obj) and _unseen_children(obj):
                coordinator.coverage.decline(
                    f"the object of node {node_id} has children the checkpoint has no node for"
                )
            if coordinator.slot_restorations or coordinator.deferred_slot_restorations:
                queue.extend(CheckpointPosition(coordinator, node_id, plan)._slots_to_restore(obj))
        # One store, not one a child.
        coordinator.matched[plan.bound[first_bound:]] = True
        if recorder.refused is None and len(pending) > first:
            recorder.assigned(
                list(map(_NODE_ID, itertools.islice(pending, first, None))),
                list(map(_WANTED, itertools.islice(pending, first, None))),
            )

    def _bind_children(self, node_id: int, obj: Trackable, children: Any, queue: deque[tuple[int, Trackable]]) -> None:
        """Bind the children of ``obj`` (at ``node_id``) that it has; queue those with children or
        slots of their own, plan the values of the leaves, and defer the children it lacks.

        This loop runs once per object of the model (a list of 20,000 variables is one call),
        so what it needs is looked up once, before it; the leaves are planned in a second loop
        (:meth:`_plan_leaves`).
        """
        coordinator = self.coordinator
        plan = cast(RestorePlan, self.plan)
        recorder = plan.recorder
        nodes = coordinator.nodes
        bound = coordinator.bound
        slot_restorations = coordinator.slot_restorations
        deferred_slots = coordinator.deferred_slot_restorations
        new_bound = plan.bound
        make_ref = weakref.ref
        lookup = _lookup_of(obj)
        # The names of obj's live children reached, for the coverage (see _covers).
        reached: list[str] = []
        reach = reached.append
        leaves: list[tuple[int, Trackable, str | None]] = []
        leaf = leaves.append
        # Once per node, not per child: slot_restorations only shrinks, and slots wait in
        # deferred_slots only when taken from it, so empty both stay empty.
        slots_pending = bool(slot_restorations or deferred_slots)
        for (child_id, local_name), key in self._named_children(node_id, children):
            ref = bound.get(child_id)
            if ref is not None and self._reached_again(child_id, ref, lookup(local_name), local_name, reach, queue):
                continue
            local = lookup(local_name)
            if local is None:
                if has_values(nodes[child_id]):
                    plan.deferrals.append((obj, local_name, child_id))
                    recorder.deferred(node_id, local_name, child_id)
                continue
            reach(local_name)
            if ref is None:
                new_bound.append(child_id)  # and matched at the end of the walk
            else:
                plan.rebound.append((child_id, ref))  # matched already
            bound[child_id] = make_ref(local)
            if (key is None and nodes[child_id].children) or (
                slots_pending and (child_id in slot_restorations or child_id in deferred_slots)
            ):
                queue.append((child_id, local))
            else:
                leaf((child_id, local, key))
        covered = self._plan_leaves(leaves, coordinator.coverage.reason is None)
        if covered:
            live = tracked_children(obj)
            # Every name of a live child reached, each once (a checkpoint may name a child twice).
            covered = live is not None and len(reached) == len(live) and live.keys() == set(reached)
        if not covered and coordinator.coverage.reason is None:
            coordinator.coverage.decline(
                f"the object of node {node_id}, or a leaf below it, has children the checkpoint does not name"
            )

    def _named_children(self, node_id: int, children: Any) -> zip[tuple[tuple[int, str], str | None]]:
        """``((child id, local name), key)`` of each child, its id checked; the key for a plain
        variable node (see :func:`~trackpoint._graph.node_bytes.variable_keys`), else None.

        Ids and names in one pass over the messages, then the keys of the children that are
        plain variables in one pass over their bytes: cheaper than both per child.
        """
        coordinator = self.coordinator
        count = coordinator.node_count
        named = [(child.node_id, child.local_name) for child in children]
        ids = [child_id for child_id, _ in named]
        if min(ids) < 0 or max(ids) >= count:
            for child_id in ids:
                check_child(child_id, count, node_id, coordinator.prefix)
        return zip(named, variable_keys(coordinator.node_bytes, ids))

    def _reached_again(
        self,
        child_id: int,
        ref: weakref.ref[Trackable],
        local: Trackable | None,
        local_name: str,
        reach: Callable[[str], None],
        queue: deque[tuple[int, Trackable]],
    ) -> bool:
        """A child whose node is bound already; True when that binding stands (nothing more to
        do), False when its object died, so that it is bound anew (keeping its place in walk order)."""
        plan = cast(RestorePlan, self.plan)
        held = ref()
        if held is None:
            plan.recorder.refuse(f"node {child_id}'s object was garbage-collected and is bound anew")
            return False
        # Reached by another path: the object here is the one bound (a tied weight), none, or
        # another that takes the same values (see _add_alias).
        if local is held:
            reach(local_name)
        elif local is not None and _add_alias(self.coordinator, plan, child_id, local):
            queue.append((child_id, local))
        return True

    def _plan_leaves(self, leaves: list[tuple[int, Trackable, str | None]], covered: bool) -> bool:
        """Plan what each leaf bound by :meth:`_bind_children` takes (gathered there rather than
        queued); return ``covered``, or False when a leaf has live children the checkpoint has no
        node for."""
        coordinator = self.coordinator
        plan = cast(RestorePlan, self.plan)
        recorder = plan.recorder
        nodes = coordinator.nodes
        uid = coordinator.restore_uid
        wanted_of = coordinator.wanted
        pending = plan.assignments
        for child_id, local, key in leaves:
            # live.is_leaf inline (a call per variable costs more than the test), then whether
            # this leaf of the checkpoint has children here.
            if covered and not (local._tp is None and type(local)._trackable_children is PLAIN_CHILDREN):
                covered = not _unseen_children(local)
            if uid > (update_uid := local._tp_update_uid):
                # A value owner's value (see protocol.ValueOwner) is named by its key alone.
                local._tp_update_uid = uid
                if key is not None and type(local)._tp_takes_value:
                    pending.append((child_id, local, key, update_uid))
                elif key is not None or nodes[child_id].attributes:
                    wanted = wanted_of(child_id, local, recorder)
                    if wanted:
                        pending.append((child_id, local, wanted, update_uid))
            else:
                recorder.refuse(f"node {child_id}'s object was assigned by a later restore")
        return covered

    def _slots_to_restore(self, trackable: Trackable) -> list[tuple[int, Trackable]]:
        """``(slot node id, slot)`` of the existing slots to walk on to from this node (see :meth:`_slot`)."""
        coordinator = self.coordinator
        plan = cast(RestorePlan, self.plan)
        waiting = coordinator.deferred_slot_restorations
        out = []
        # This node is an optimizer bound after some of its variables.
        entries = waiting.pop(self.node_id, None)
        if entries:
            plan.undo.append(functools.partial(waiting.__setitem__, self.node_id, entries))
            for variable, slot_id, slot_name in entries:
                out.extend(self._slot(trackable, variable, slot_id, slot_name))
        # This node is a variable with slots.
        slots = coordinator.slot_restorations.pop(self.node_id, None)
        if slots:
            plan.undo.append(functools.partial(coordinator.slot_restorations.__setitem__, self.node_id, slots))
            for opt_id, slot_id, slot_name in slots:
                optimizer = coordinator.bound_object(opt_id)
                if optimizer is None:
                    entries = waiting.setdefault(opt_id, [])
                    entries.append((trackable, slot_id, slot_name))
                    plan.undo.append(entries.pop)
                    plan.recorder.slot_wait(opt_id, self.node_id, slot_id, slot_name)
                else:
                    out.extend(self._slot(optimizer, trackable, slot_id, slot_name))
        return out

    def _slot(
        self, optimizer: Trackable, variable: Trackable, slot_id: int, slot_name: str
    ) -> list[tuple[int, Trackable]]:
        """The slot to bind and walk on to, if the optimizer has it already (``get_slot``).

        One it lacks is planned instead: its optimizer is asked for it
        (``_create_or_restore_slot_variable``) once the objects found have their values, so
        that a restore that fails makes no slot.
        """
        if getattr(optimizer, "_create_or_restore_slot_variable", None) is None:
            return []
        coordinator = self.coordinator
        plan = cast(RestorePlan, self.plan)
        get_slot = getattr(optimizer, "get_slot", None)
        slot = get_slot(variable, slot_name) if get_slot is not None else None
        if slot is None:
            # What the optimizer does is its own: a repeat could not reproduce it.
            plan.recorder.refuse(f"slot {slot_name!r} of node {slot_id} is to be created by its optimizer")
            plan.new_slots.append((optimizer, variable, slot_id, slot_name))
            return []
        return [(slot_id, slot)] if CheckpointPosition(coordinator, slot_id, plan).bind_object(slot) else []
