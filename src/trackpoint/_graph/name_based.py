"""Restoring a checkpoint without an object graph (TF1's ``Saver``) by global variable names.

TF1 saved each variable under its global name (``bert/encoder/layer_0/attention/kernel``,
``global_step``, the Adam slots ``<var>/Adam`` and ``<var>/Adam_1``, ``beta1_power``). TF 2
restores such a file into objects by looking every live variable up under its name
(``NameBasedSaverStatus``, ``checkpoint.py``); :class:`NameBasedRestore` does the same, with
this package's guarantee on top: the values of one call are read, checked and assigned all
or nothing (TF assigns variable by variable and stops half-way on a shape mismatch).

As in TF, a checkpoint value no object asks for is left alone; a live object whose name the
checkpoint lacks is noted (its status's assertions fail); every object reached is marked as
restored by this call, found or not, so a later restore wins and an earlier one no longer
applies. Each object that may gain children is told of the restore (``_defer_restore(None,
...)``): a variable created under it later is looked up by name then (restore-on-create),
with its whole subtree. Slot variables an optimizer creates later are not (they are no
tracked children), as in TF.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph.assign import assign, copy_in_place
from trackpoint._graph.live import breadth_first, is_leaf
from trackpoint._graph.plan import Assignment, Wanted, new_restore_uid
from trackpoint._graph.values import CheckpointValues
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import VARIABLE_VALUE
from trackpoint._tracking.slots import slot_variables
from trackpoint.errors import InvalidArgumentError

__all__ = ["NameBasedRestore", "global_name"]


def global_name(obj: Trackable, slot_of: tuple[Trackable, Trackable, str] | None = None) -> str | None:
    """The name ``obj``'s value has in a TF1 checkpoint; None when it has none.

    Args:
        obj: A live object holding values.
        slot_of: ``(optimizer, variable, slot name)`` when ``obj`` is a slot variable: the
            optimizer names it (``protocol.GlobalSlotNames``) if it can.
    """
    if slot_of is not None:
        owner, variable, slot_name = slot_of
        named = getattr(owner, "_tp_slot_global_name", None)
        if named is not None:
            return named(variable, slot_name)
    if not type(obj)._tp_global_name:
        return None
    return obj._checkpoint_full_name() or None


class NameBasedRestore:
    """One name-based restore: the checkpoint's values, and what the objects reached lacked.

    It is the ``PendingRestore`` (``trackpoint.protocol``) told to every object that may gain
    children, for restore-on-create.

    Attributes:
        prefix: The checkpoint.
        values: Its values, read while a call runs (the files close in between).
        restore_uid: Orders restores: a later one has a larger uid and wins.
        skip_slot_variables: Leave optimizer slot variables alone.
        restored_keys: The keys whose values some object took.
    """

    def __init__(self, reader: BundleReader, skip_slot_variables: bool = False) -> None:
        self.prefix = reader.prefix
        self.values = CheckpointValues(reader)
        self.restore_uid = new_restore_uid()
        self.skip_slot_variables = skip_slot_variables
        self.restored_keys: set[str] = set()
        # id(object) -> (a weak reference to it, the names it asked for in vain): objects die
        # while the status lives, and a Trackable need not be hashable.
        self._unused: dict[int, tuple[weakref.ref[Trackable], list[str]]] = {}

    # -- restoring ----------------------------------------------------------------------

    def restore(self, trackable: Trackable, attached: Mapping[str, Trackable] | None = None) -> None:
        """Give ``trackable``, its descendants (and ``attached`` dependencies) and the slot
        variables among them the values saved under their global names, all or none.

        Raises:
            InvalidArgumentError: A value of another dtype or shape than its object's, naming
                the key and the object; no object changed.
            DataLossError: A value is damaged (its checksum fails), naming the file and key.
        """
        objects, slots_of = _reached(trackable, attached or {}, self.skip_slot_variables)
        uid = self.restore_uid
        objects = [obj for obj in objects if obj._tp_update_uid < uid]  # a later restore's stay
        assignments: list[Assignment] = []
        unused: list[tuple[Trackable, list[str]]] = []
        containers: list[Trackable] = []  # no values of their own
        reader = self.values.reader
        for index, obj in enumerate(objects):
            names = list(obj._checkpoint_tensor_names())
            if not names:
                containers.append(obj)  # reached, and so marked below, as TF marks it
                continue
            key = global_name(obj, slots_of.get(id(obj)))
            if key is None or names != [VARIABLE_VALUE]:
                unused.append((obj, names))  # TF's "no name= argument": nothing to look up
            elif key not in reader:
                unused.append((obj, [key]))
            else:
                wanted: Wanted = key if type(obj)._tp_takes_value else [(VARIABLE_VALUE, key)]
                assignments.append((index, obj, wanted, obj._tp_update_uid))
        with self.values.reading():  # a restore-on-create reopens the files, and closes them after
            for work in assign(self.values, assignments, lambda i, w, exc: self._refused(objects[i], w, exc)):
                copy_in_place(*work)
        for obj in objects:
            obj._tp_update_uid = uid
        for _, _, wanted, _ in assignments:
            self.restored_keys.add(wanted if isinstance(wanted, str) else wanted[0][1])
        for obj, names in unused:
            self._unused[id(obj)] = (weakref.ref(obj), names)
        waiting = {id(obj): obj for obj in containers}
        waiting.update((id(obj), obj) for obj in objects if not is_leaf(obj))
        for obj in waiting.values():
            obj._defer_restore(None, self)  # see the module docstring: restore-on-create

    def _refused(self, obj: Trackable, wanted: Wanted, exc: Exception) -> InvalidArgumentError:
        key = wanted if isinstance(wanted, str) else wanted[0][1]
        return InvalidArgumentError(
            f"{self.prefix}: cannot restore checkpoint key {key!r} into {obj!r} (matched by its global name in "
            f"this name-based checkpoint): {exc}. Nothing was restored; give the object the checkpoint's dtype and "
            "shape, or another name",
            path=self.prefix,
            key=key,
        )

    # -- what the status asks -----------------------------------------------------------

    def unused(self, ignore: Sequence[Trackable] = ()) -> list[tuple[Trackable, list[str]]]:
        """Live objects that found no value under their names, with those names (``ignore`` left out)."""
        ignored = {id(obj) for obj in ignore}
        out = []
        for key, (ref, names) in self._unused.items():
            obj = ref()
            if obj is not None and key not in ignored:
                out.append((obj, names))
        return out

    def not_restored(self, root: Trackable, attached: Mapping[str, Trackable]) -> list[Trackable]:
        """Live objects below ``root`` that neither this restore nor a later one reached
        (slot variables made after it, say)."""
        objects, _ = _reached(root, attached, self.skip_slot_variables)
        return [obj for obj in objects if obj._tp_update_uid < self.restore_uid]

    # -- the rest of PendingRestore: never a simple variable's value ---------------------

    def is_simple_variable(self) -> bool:
        return False

    def simple_variable_spec(self) -> tuple[tuple[int, ...], np.dtype] | None:
        return None

    def simple_variable_value(self, out: np.ndarray | None = None) -> Any:
        raise InvalidArgumentError(f"{self.prefix}: a name-based restore holds no single variable's value")

    def mark_restored(self, trackable: Trackable) -> None:
        del trackable


def _reached(
    root: Trackable, attached: Mapping[str, Trackable], skip_slots: bool
) -> tuple[list[Trackable], dict[int, tuple[Trackable, Trackable, str]]]:
    """The objects below ``root`` (breadth first, as TF lists them), then the slot variables
    among them unless skipped; and, by ``id()``, each slot's ``(optimizer, variable, slot name)``."""
    objects = list(breadth_first(root, attached).nodes)
    if skip_slots:
        return objects, {}
    slots = slot_variables(objects)
    slots_of = {id(slot): (objects[owner], objects[var], name) for owner, name, var, slot in slots}
    seen = {id(obj) for obj in objects}
    objects.extend(slot for _, _, _, slot in slots if id(slot) not in seen)
    return objects, slots_of
