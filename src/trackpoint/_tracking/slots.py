"""Slot variables: the per-variable state an optimizer keeps, found through its slot methods.

TF's informal protocol, which ``tp.optimizers`` implement and any other class may: an object
with ``get_slot_names()`` and ``get_slot(variable, name)`` owns slot variables; one that also
has ``_create_or_restore_slot_variable(position, variable, name)`` can create a slot a
restore brings (see ``_graph.walk``). One with many variables may also define
``_tp_slots_of(objects)``, returning ``(slot name, index in objects, slot)`` in the order
:func:`slot_variables` gives: the scan then asks it once, not ``get_slot`` once for every
object and slot name (60,000 calls a save for a torch model of 20,000 parameters with AdamW).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

from trackpoint._tracking.base import Trackable

__all__ = ["SlotOwner", "slot_variables"]


@runtime_checkable
class SlotOwner(Protocol):
    """An object keeping slot variables for other variables (an optimizer)."""

    def get_slot_names(self) -> list[str]: ...

    def get_slot(self, var: Any, name: str) -> Trackable | None: ...


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
