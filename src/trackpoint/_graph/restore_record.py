"""The restore record: a restore repeats the previous restore's bindings when nothing moved.

Owner: ``tp.Checkpoint`` keeps the record of its last restore and offers it to the next
(see :func:`~trackpoint._graph.restore.restore_checkpoint`). Reason: an evaluator or server
restoring each new checkpoint of a training job, or a job going back to its last good
checkpoint, restores the same object graph into the same objects; repeating the bindings
spares the walk, and only the values are read (PERFORMANCE.md has the measurement, which
must stay above 20% on a realistic model to keep this module). Invalidation: a record is
made only from a walk that a repeat reproduces exactly (the walk reports every event that
would not repeat to its :class:`Recorder`, with a reason), and applies only while none of its
bound objects gained, lost or replaced a child or slot (``_tracking.epoch.changed_since``:
objects built elsewhere meanwhile do not count), to the same serialized graph, options and
root. Every refusal is logged at DEBUG on the ``trackpoint.reuse`` logger.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from trackpoint._tracking.base import Trackable
from trackpoint._tracking.epoch import changed_since, structure_epoch, untracked_reason

if TYPE_CHECKING:
    from trackpoint._graph.coordinator import RestoreCoordinator

__all__ = ["NOT_RECORDING", "Recorder", "RestoreRecord", "log", "replay"]

log = logging.getLogger("trackpoint.reuse")


@dataclass(frozen=True)
class RestoreRecord:
    """What a restore did, to do again without walking the graph.

    It holds weak references only, so it keeps no object alive.

    Attributes:
        epoch: The structure epoch of the walk.
        graph: The serialized object graph it was made from.
        skip_slot_variables: The restore's option of that name.
        slot_owners: The nodes owning the graph's slot variables, which spares a repeat the
            slot scan (its graph is the same).
        bound: Node id -> weak reference to its object, in walk order.
        value_ids: The node id of each object assigned, in order.
        value_keys: Its key, or ``[(tensor name, key)]``, parallel to ``value_ids`` (two
            lists rather than one of pairs: a pair per variable is an object per variable
            for the garbage collector to scan).
        stages: Where each walk began: the number of bindings, deferrals and values before it.
            A restore walks the root's subtree, then each attached dependency's; a repeat
            keeps that order, which decides where slots wait for their optimizers.
        deferrals: ``(parent node id, local name, child node id)`` of each position parked
            on a live object for restore-on-create.
        deferred_slots: ``(optimizer node id, variable node id, slot node id, slot name)``
            of each slot that had to wait for its optimizer, in the stage that bound the
            variable (a later stage may bind the optimizer and resolve it).
        unused_attributes: Node id -> attribute names its object does not take.
        covered: Whether the walk bound every live child of every object it expanded (see
            ``Coverage.binds_every_live_object``); a repeat, made only while the
            structure is the one walked, holds it too.
        num_shards: The data shards of the checkpoint it was read from.
        entry_count: The entries of that checkpoint's index.
    """

    epoch: int
    graph: bytes
    skip_slot_variables: bool
    slot_owners: list[int]
    bound: dict[int, weakref.ref[Trackable]]
    value_ids: list[int]
    value_keys: list[Any]
    stages: list[tuple[int, int, int]]
    deferrals: list[tuple[int, str, int]]
    deferred_slots: list[tuple[int, int, int, str]]
    unused_attributes: dict[int, tuple[str, ...]]
    covered: bool
    num_shards: int
    entry_count: int

    def reads_most(self, entry_count: int) -> bool:
        """Whether a repeat reads most of a checkpoint of ``entry_count`` entries, as this
        restore's values are at least half of them."""
        return 2 * len(self.value_keys) >= entry_count

    @property
    def read_one_shard_whole(self) -> bool:
        """Whether the restore read most of a checkpoint of one data shard: a repeat (most likely
        of a checkpoint of the same structure) will too, so it may start that download early."""
        return self.num_shards == 1 and self.reads_most(self.entry_count)

    def refusal(self, graph: bytes | None, skip_slot_variables: bool, root: Trackable) -> str | None:
        """Why this record does not hold, now, for a restore of the serialized ``graph`` into
        ``root``; None when it does (``graph`` None: all but the graph compared).

        The root is compared too: a copy of a checkpoint object (``copy.deepcopy``) carries
        its record along, whose references still point at the original's objects.
        """
        if changed_since(self.epoch, (ref() for ref in self.bound.values())):
            return "the structure changed since (an object gained, lost or replaced a child or a slot)"
        root_ref = self.bound.get(0)
        if root_ref is None or root_ref() is not root:
            return "the root is another object"
        if self.skip_slot_variables != skip_slot_variables:
            return "experimental_skip_slot_variables differs"
        if graph is not None and self.graph != graph:
            return "the checkpoint has another object graph"
        return None


class Recorder:
    """Takes down the events of one restore's walks that a :class:`RestoreRecord` repeats.

    The walk reports each event a repeat could not reproduce through :meth:`refuse`, with
    a reason; after the first, the recorder takes nothing more down. :data:`NOT_RECORDING`
    is one that refused from the start, for walks no record is made of (restore-on-create,
    repeats themselves).

    Attributes:
        refused: Why no record is to be made of this restore; None while one can be.
    """

    __slots__ = ("deferrals", "refused", "slot_waits", "stages", "value_ids", "value_keys")

    def __init__(self, refused: str | None = None) -> None:
        self.refused = refused
        self.value_ids: list[int] = []
        self.value_keys: list[Any] = []
        self.deferrals: list[tuple[int, str, int]] = []
        self.stages: list[tuple[int, int, int]] = []
        self.slot_waits: list[tuple[int, int, int, str]] = []

    def refuse(self, reason: str) -> None:
        """A repeat could not reproduce what just happened."""
        if self.refused is None:
            self.refused = reason

    def stage(self, bound: int) -> None:
        """A walk begins, ``bound`` nodes having been bound before it."""
        if self.refused is None:
            self.stages.append((bound, len(self.deferrals), len(self.value_ids)))

    def deferred(self, parent_id: int, local_name: str, child_id: int) -> None:
        """The child ``local_name`` of the object at ``parent_id`` waits to be created."""
        if self.refused is None:
            self.deferrals.append((parent_id, local_name, child_id))

    def slot_wait(self, optimizer_id: int, variable_id: int, slot_id: int, slot_name: str) -> None:
        """A slot of the variable at ``variable_id`` waits for its optimizer to be bound."""
        if self.refused is None:
            self.slot_waits.append((optimizer_id, variable_id, slot_id, slot_name))

    def assigned(self, node_ids: Sequence[int], wanted: Sequence[Any]) -> None:
        """The objects at ``node_ids`` are to take the values ``wanted`` names."""
        if self.refused is None:
            self.value_ids.extend(node_ids)
            self.value_keys.extend(wanted)

    def finish(self, coordinator: RestoreCoordinator, graph: bytes, epoch: int) -> RestoreRecord | None:
        """The record of the restore ``coordinator`` just made, begun in ``epoch``; None (the
        reason logged) when a repeat would not reproduce it."""
        reason = self.refused
        if reason is None and structure_epoch() != epoch:
            reason = "an object was created or replaced during the restore"
        bound = coordinator.bound
        objects = [ref() for ref in bound.values()]
        if reason is None and any(obj is None for obj in objects):  # `None in` would call objects' __eq__
            reason = "a bound object was garbage-collected during the restore"
        if reason is None:
            reason = untracked_reason(cast(list[Trackable], objects), lookups=True)
        self.refused = reason or "recorded"  # what the coordinator does later belongs to no record
        if reason is not None:
            log.debug("%s: the bindings of this restore are not kept for the next: %s", coordinator.prefix, reason)
            return None
        return RestoreRecord(
            epoch,
            graph,
            coordinator.skip_slot_variables,
            coordinator.slot_owners,
            dict(bound),
            self.value_ids,
            self.value_keys,
            self.stages,
            self.deferrals,
            self.slot_waits,
            {node_id: tuple(names) for node_id, names in coordinator.unused_attributes.items()},
            coordinator.coverage.covered,
            coordinator.values.reader.num_shards,
            coordinator.values.reader.entry_count,
        )


NOT_RECORDING = Recorder("nothing is recorded of this walk")


def replay(coordinator: RestoreCoordinator, record: RestoreRecord) -> bool:
    """Repeat what ``record`` took down, as one restore of ``coordinator``; False, doing
    nothing, if one of its objects has died. Its values are assigned all or none, as by
    :meth:`RestoreCoordinator.restore`."""
    refs = list(record.bound.values())
    found = [ref() for ref in refs]
    if any(obj is None for obj in found):
        log.debug(
            "%s: walking the object graph: the previous restore's bindings do not hold: one of its objects is gone",
            coordinator.prefix,
        )
        return False
    log.debug("%s: repeating the bindings of the previous restore", coordinator.prefix)
    objects = cast(list[Trackable], found)
    node_ids = list(record.bound)
    by_node = dict(zip(node_ids, objects))
    # Per node: its position in walk order, to tell which stage a recorded effect belongs to.
    order = dict(zip(node_ids, range(len(node_ids)))) if record.deferred_slots or record.unused_attributes else {}
    plan = coordinator.new_plan()
    ends = [*record.stages[1:], (len(node_ids), len(record.deferrals), len(record.value_ids))]
    for (b0, d0, v0), (b1, d1, v1) in zip(record.stages, ends):
        stage = node_ids[b0:b1]
        plan.assignments.extend(
            (node_id, by_node[node_id], wanted, by_node[node_id]._tp_update_uid)
            for node_id, wanted in zip(record.value_ids[v0:v1], record.value_keys[v0:v1])
        )
        coordinator.bind_stage(plan, stage, refs[b0:b1], objects[b0:b1])
        for opt_id, var_id, slot_id, slot_name in record.deferred_slots:
            if b0 <= order[var_id] < b1:
                coordinator.deferred_slot_restorations.setdefault(opt_id, []).append(
                    (by_node[var_id], slot_id, slot_name)
                )
        coordinator.take_waiting_slots(stage)
        for node_id, names in record.unused_attributes.items():
            if b0 <= order[node_id] < b1:
                coordinator.unused_attributes[node_id] = list(names)
        plan.deferrals.extend(
            (by_node[parent_id], local_name, child_id) for parent_id, local_name, child_id in record.deferrals[d0:d1]
        )
    coordinator.execute(plan)
    return True
