"""Slot variables: the per-variable state an optimizer keeps, found through its slot methods.

The methods are the extension protocol's :class:`~trackpoint.protocol.SlotOwner` and
:class:`~trackpoint.protocol.BulkSlots`: an owner with many variables lists its slots in one
call (``_tp_slots_of``), not ``get_slot`` once for every object and slot name (60,000 calls a
save for a torch model of 20,000 parameters with AdamW).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import SlotOwner

__all__ = ["slot_variables"]


def slot_variables(objects: Sequence[Trackable]) -> list[tuple[int, str, int, Trackable]]:
    """``(owner index, slot name, variable index, slot)`` of every slot the owners among
    ``objects`` hold for variables among ``objects``: owners in order, then their slot names,
    then the variables in order (the order TF numbers slot nodes in)."""
    # One check per class rather than per object: a model has few classes and many objects.
    owners = {cls for cls in set(map(type, objects)) if hasattr(cls, "get_slot_names")}
    if not owners:
        return []
    out: list[tuple[int, str, int, Trackable]] = []
    for owner_index, obj in enumerate(objects):
        if type(obj) not in owners:
            continue
        bulk = getattr(obj, "_tp_slots_of", None)
        if bulk is not None:
            out.extend((owner_index, name, var_index, slot) for name, var_index, slot in bulk(objects))
            continue
        owner = cast(SlotOwner, obj)
        for name in owner.get_slot_names():
            for var_index, variable in enumerate(objects):
                slot = owner.get_slot(variable, name)
                if slot is not None:
                    out.append((owner_index, name, var_index, slot))
    return out
