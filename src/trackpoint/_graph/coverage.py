"""The "covered" shortcut: whether a restore bound every live object, known without walking them again.

Owner: the restore coordinator holds one :class:`Coverage`; the walks (``walk``), a repeat
(``restore``, from the record's ``covered``) and the coordinator feed it. Reason:
``assert_existing_objects_matched`` must know whether every object reachable from the root is
bound; walking the live objects again costs as much as the restore's own walk on a model of
many variables (``tests/graph/test_live_coverage.py`` checks the answer against that walk).
Invalidation: it holds only while the restore's walks bound every live child of every object
they expanded (each walk that finds otherwise declines it, with the reason), and while none of
the bound objects gained, lost or replaced a child or slot since the walk (the epoch is settled
by :meth:`Coverage.settle`; ``epoch.changed_since`` is asked when the answer is wanted); a later
walk (restore-on-create) unsettles it. Every decline is logged at DEBUG on the
``trackpoint.reuse`` logger and kept in :attr:`Coverage.reason`.
"""

from __future__ import annotations

import itertools
import logging
import operator
import weakref
from collections.abc import Mapping
from typing import cast

from trackpoint._graph.live import ask_containers
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.epoch import changed_since, structure_epoch, untracked_reason
from trackpoint._tracking.slots import slot_variables

__all__ = ["Coverage"]

log = logging.getLogger("trackpoint.reuse")


class Coverage:
    """Whether one restore's bindings cover every live object; see the module docstring.

    Attributes:
        reason: Why the walks did not cover every live object (None while they did).
        epoch: The structure epoch that held from before the restore's walk (or repeat) until
            after it, when the walks covered every object; None otherwise.
    """

    __slots__ = ("epoch", "reason")

    def __init__(self) -> None:
        self.reason: str | None = None
        self.epoch: int | None = None

    @property
    def covered(self) -> bool:
        """Whether every walk so far bound every live child of every object it expanded."""
        return self.reason is None

    def decline(self, reason: str) -> None:
        """A walk found a live object it did not bind, or cannot tell: the shortcut no longer applies."""
        if self.reason is None:
            self.reason = reason
            log.debug("the restore's bindings will not stand for a walk of the live objects: %s", reason)

    def unsettle(self) -> None:
        """A walk begins after the restore (restore-on-create): the structure may have changed."""
        self.epoch = None

    def settle(self, epoch: int) -> None:
        """The restore's walk (or repeat) is over; it began in ``epoch``."""
        if self.reason is None and structure_epoch() == epoch:
            self.epoch = epoch

    def binds_every_live_object(
        self,
        bound: Mapping[int, weakref.ref[Trackable]],
        root: Trackable,
        attached: Mapping[str, Trackable],
        skip_slot_variables: bool,
    ) -> bool:
        """Whether every object reachable from ``root`` (and ``attached``, and the slots of its
        optimizers unless slots are skipped) is bound, known without walking them; False (the
        reason logged) when that is not known.

        Known when the restore's walks covered every object, when no bound object gained, lost
        or replaced a child or slot since (``epoch.changed_since``, and every bound object's
        class reports such changes), and when the root, the attached
        objects and every slot the bound optimizers hold are bound. The objects found from the
        root are then exactly the bound ones.
        """
        reason = self._refusal(bound, root, attached, skip_slot_variables)
        if reason is not None:
            log.debug("walking the live objects to match them: %s", reason)
        return reason is None

    def _refusal(
        self,
        bound: Mapping[int, weakref.ref[Trackable]],
        root: Trackable,
        attached: Mapping[str, Trackable],
        skip_slot_variables: bool,
    ) -> str | None:
        if self.epoch is None:
            return self.reason or "the structure changed during the restore, or a walk followed it"
        root_ref = bound.get(0)
        if root_ref is None or root_ref() is not root:
            return "the root is not the object bound to the checkpoint's root"
        objects = [ref() for ref in bound.values()]
        if not all(map(operator.is_not, objects, itertools.repeat(None))):  # `None in` would call __eq__
            return "a bound object was garbage-collected"
        live = cast(list[Trackable], objects)
        epoch = self.epoch
        if changed_since(epoch, live):
            return "the structure changed since the restore"
        reason = untracked_reason(live, lookups=True)
        if reason is not None:
            return reason
        ask_containers(live)  # may raise, or move the epoch, as the walk of live objects would
        if changed_since(epoch, live):
            return "a container changed its children when asked"
        slots = [] if skip_slot_variables else [slot for *_, slot in slot_variables(live)]
        if attached or slots:
            ids = set(map(id, live))
            if not all(id(obj) in ids for obj in itertools.chain(attached.values(), slots)):
                return "an attached object or a slot is not bound"
        return None
