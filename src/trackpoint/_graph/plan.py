"""What one restore call is to do, gathered by its walks (or a repeat) before anything changes."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable

from trackpoint._graph.restore_record import NOT_RECORDING, Recorder
from trackpoint._tracking.base import Trackable

__all__ = ["Assignment", "RestorePlan", "Wanted", "new_restore_uid"]

#: What an object is to take: a value owner's value by its key alone, or ``[(tensor name, key)]``.
Wanted = str | list[tuple[str, str]]
#: (node id, object, wanted, the object's update uid before the walk).
Assignment = tuple[int, Trackable, Wanted, int]

_restore_uids = itertools.count(1)


def new_restore_uid() -> int:
    """A uid for a new restore, larger than every earlier one's (a later restore wins)."""
    return next(_restore_uids)


class RestorePlan:
    """What one ``RestoreCoordinator.restore`` call is to do, gathered by its walks.

    The walks bind nodes and note here what to do; objects are changed only once every
    walk is over and the values were read and checked.

    Attributes:
        recorder: Where the walks report what a repeat would need (see ``restore_record``).
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

    __slots__ = ("assignments", "bound", "deferrals", "new_slots", "rebound", "recorder", "undo")

    def __init__(self, recorder: Recorder = NOT_RECORDING) -> None:
        self.recorder = recorder
        self.assignments: list[Assignment] = []
        self.bound: list[int] = []
        self.deferrals: list[tuple[Trackable, str, int]] = []
        self.new_slots: list[tuple[Trackable, Trackable, int, str]] = []
        self.rebound: list[tuple[int, weakref.ref[Trackable]]] = []
        self.undo: list[Callable[[], object]] = []
