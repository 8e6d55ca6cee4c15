"""The structure epoch: a process-wide count that moves whenever an object's children or slots change.

Each change is also noted on the object that changed (:func:`structure_changed`), so a reuse
can ask whether *its* objects changed (:func:`changed_since`) rather than whether any object did.

Two reuses depend on it: a save that repeats the layout of the previous save (see
``_graph.save_layout``) and a restore that repeats the bindings of the previous restore
(see ``_graph.restore_record``). Both hold only while the epoch stands still *and* every
object involved keeps its children (and slots) where this module can see them change: in
``Trackable``'s own children dict, a container wrapper's tracked state, or an optimizer's
slot table. Each such class registers the very methods that read that state
(:func:`trust_children`, :func:`trust_slots`); a subclass that overrides one computes its
children its own way, so it is walked every time (:func:`untracked_reason` says why).

Every code path that changes tracked children calls :func:`structure_changed`; the test
``tests/tracking/test_epoch.py`` checks that every mutating method of ``list`` and
``dict`` has a wrapper override that reports its change.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "changed_since",
    "structure_changed",
    "structure_epoch",
    "trust_children",
    "trust_slots",
    "untracked_reason",
]

_ticks = itertools.count(1)  # next() is atomic under the GIL, unlike += on a global
_epoch = 0
_unnoted = 0  # the tick of the last change not noted on the object that changed


def _stamp(obj: Any) -> int:
    # From the instance's own attributes: a class's __getattr__ could answer anything.
    try:
        stamp = vars(obj).get("_tp_changed", 0)
    except TypeError:  # no __dict__ (__slots__): structure_changed could note nothing on it
        return 0
    return stamp if type(stamp) is int else 1 << 62


_children: set[Callable[..., Any]] = set()  # trusted _trackable_children functions
_lookups: set[Callable[..., Any]] = set()  # trusted _lookup_dependency functions
_SLOT_METHODS = ("get_slot_names", "get_slot", "_create_or_restore_slot_variable")
_slots: set[tuple[Callable[..., Any] | None, ...]] = set()  # trusted triples of _SLOT_METHODS


def structure_changed(owner: object | None = None) -> None:
    """Note that ``owner`` gained, lost or replaced a child (or a slot); None: some object did.

    The epoch moves either way; the change is also noted on ``owner`` (its ``_tp_changed``),
    so that :func:`changed_since` can tell that objects elsewhere changed, not these.
    ``owner`` must be the very object whose ``_trackable_children`` (or slot methods) now answer
    otherwise: a change noted on another object would let a restore repeat bindings that no
    longer hold. When unsure, pass nothing: every record and every reused layout then lapses.
    """
    global _epoch, _unnoted
    _epoch = tick = next(_ticks)
    if owner is None:
        _unnoted = tick
        return
    try:
        object.__setattr__(owner, "_tp_changed", tick)
    except (AttributeError, TypeError):  # no room on it (__slots__): nothing can be said of any object
        _unnoted = tick


def structure_epoch() -> int:
    """The current epoch; equal values mean no tracked structure changed in between."""
    return _epoch


def changed_since(epoch: int, objects: Iterable[Any]) -> bool:
    """Whether any of ``objects`` gained, lost or replaced a child or a slot after ``epoch`` (an
    earlier :func:`structure_epoch`), or a change was made that was not noted on its object.

    An object that changed is noted so by :func:`structure_changed`; objects created or changed
    elsewhere since (another model built beside these) leave these as they were.
    """
    if _epoch == epoch:
        return False
    if _unnoted > epoch:
        return True
    return max(map(_stamp, objects), default=0) > epoch


def trust_children(cls: type[Any]) -> None:
    """Trust ``cls``'s ``_trackable_children`` and ``_lookup_dependency``: every change to what
    they return is reported by :func:`structure_changed`."""
    _children.add(cls._trackable_children)
    _lookups.add(cls._lookup_dependency)


def trust_slots(cls: type[Any]) -> None:
    """Trust ``cls``'s slot methods (``get_slot_names``, ``get_slot``,
    ``_create_or_restore_slot_variable``): every slot they create is reported, and restoring
    into an existing slot only returns it."""
    _slots.add(_slot_methods(cls))


def _slot_methods(cls: type) -> tuple[Callable[..., Any] | None, ...]:
    return tuple(getattr(cls, name, None) for name in _SLOT_METHODS)


def untracked_reason(objects: Iterable[Any], lookups: bool = False) -> str | None:
    """Why a change to these objects' children or slots might not be reported; None if none.

    Args:
        objects: The objects of a save's or a restore's graph.
        lookups: Also require each class to find a child by name (``_lookup_dependency``,
            what a restore calls) from its tracked state.
    """
    classes: set[type[Any]] = set(map(type, objects))
    for cls in classes:  # a model has many objects and few classes
        if cls._trackable_children not in _children:
            return f"{cls.__name__} computes its own children (_trackable_children)"
        if lookups and cls._lookup_dependency not in _lookups:
            return f"{cls.__name__} finds its children its own way (_lookup_dependency)"
        if (hasattr(cls, "get_slot_names") or hasattr(cls, "_create_or_restore_slot_variable")) and (
            _slot_methods(cls) not in _slots
        ):
            return f"{cls.__name__} has slot methods that do not report their slots"
    return None
