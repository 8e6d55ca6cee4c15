"""The save layout cache: a save repeats the previous save's walk, keys and graph when nothing moved.

Owner: ``tp.Checkpoint`` keeps the layout of its last save and hands it to the next
(``serialize``). Reason: walking the objects, escaping every key and encoding the object
graph is most of a save's Python time; a training loop saves the same objects over and
over (PERFORMANCE.md has the measurement, which must stay above 20% on a realistic model to
keep this module). Invalidation: the layout records the structure epoch
(``_tracking.epoch``) it was made in and is reused only while the epoch stands still, every
class involved is one whose children and slots report to that epoch, every list and dict
wrapper's storage is as the wrapper left it, and every object names the same tensors.
Anything else walks again, with the reason logged at DEBUG on the ``trackpoint.reuse`` logger.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from trackpoint._graph.keys import OBJECT_ATTRIBUTES
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.data_structures import DictWrapper, ListWrapper
from trackpoint._tracking.epoch import structure_epoch, untracked_reason
from trackpoint._tracking.protocol import VariableValue
from trackpoint.errors import InvalidArgumentError

__all__ = ["Entry", "SaveLayout", "cannot_save", "make_layout", "reuse", "tensors_of"]

log = logging.getLogger("trackpoint.reuse")

#: An object that offers its variable value alone (``protocol.VariableValue``) as itself, any
#: other object as ``(object, tensor names, checkpoint keys)``.
Entry = Trackable | tuple[Trackable, list[str], list[str]]


@dataclass(frozen=True)
class SaveLayout:
    """The layout of a save, reusable while no object gains, loses or replaces a child.

    Attributes:
        epoch: The structure epoch it was made in.
        entries: Each object's :data:`Entry`, in write order.
        graph: The object graph as plain lists (``serialize``'s), encoded once per layout.
        owners: The owner of each value, in order.
        keys: The key of each value, in order.
        variables: Every entry's object when all offer their variable value alone, through one
            class's ``_tp_variable_value`` (the common case: a model of ``tp.Variable``\\ s), else None.
        value_of: That ``_tp_variable_value``, or a getter of the attribute its class names in
            ``_tp_value_fields``, called for each of ``variables``.
        copy_on_write: Whether every owner's class is copy-on-write (``protocol.Saveable``):
            an async save then takes the values as they are.
        hooks: Objects with an after-save check, run on every save.
        containers: List and dict wrappers: an edit of their storage made outside the wrapper
            reports to no epoch, so a reuse first asks each whether its storage is as it left it.
    """

    epoch: int
    entries: list[Entry]
    graph: Any
    owners: list[Trackable]
    keys: list[str]
    variables: list[Trackable] | None
    value_of: Callable[[Any], Any] | None
    copy_on_write: bool
    hooks: list[Trackable]
    containers: list[ListWrapper | DictWrapper]


def make_layout(
    epoch: int,
    objects: Sequence[Trackable],
    entries: list[Entry],
    graph: Any,
    owners: list[Trackable],
    keys: list[str],
    hooks: list[Trackable],
    weak_root: bool = False,
) -> SaveLayout | None:
    """The layout of a save just walked in ``epoch``; None (logged) when it could not be
    trusted, or would keep objects alive that must go (``weak_root``: the root is held weakly)."""
    if weak_root:
        reason: str | None = "it would keep the variables of a weakly held root alive"
    else:
        reason = untracked_reason(objects)
    if reason is not None:
        log.debug("the save layout is not kept: %s", reason)
        return None
    # Asked of the few distinct classes rather than of every entry.
    classes = set(map(type, entries))
    getters = {_value_getter(cls) for cls in classes}
    getter = getters.pop() if len(getters) == 1 and tuple not in classes and not hooks else None
    # The value field read in C (protocol.VariableValue._tp_value_fields), else the method.
    value_of = operator.attrgetter(getter) if isinstance(getter, str) else getter
    # All one kind: the entries are the variables (one list for both).
    variables = cast(list[Trackable], entries) if value_of is not None else None
    owner_classes: set[type[Trackable]] = set(map(type, owners))
    copy_on_write = all(cls._tp_copy_on_write for cls in owner_classes)
    containers = [obj for obj in objects if isinstance(obj, (ListWrapper, DictWrapper))]
    return SaveLayout(epoch, entries, graph, list(owners), keys, variables, value_of, copy_on_write, hooks, containers)


def _value_getter(cls: type) -> str | Callable[[Any], Any] | None:
    """The name of the attribute holding a ``cls`` object's variable value, or its
    ``_tp_variable_value``, or None (see ``protocol.VariableValue``)."""
    method = getattr(cls, "_tp_variable_value", None)
    fields = getattr(cls, "_tp_value_fields", None) if method is not None else None
    return fields[1] if fields is not None else method


def reuse(layout: SaveLayout) -> list[Any] | None:
    """The values to save along ``layout``, in its key order; None (with the reason logged) when
    the layout no longer holds and the objects must be walked again."""
    reason = _stale(layout)
    if reason is None and layout.variables is not None and layout.value_of is not None:
        try:
            values = list(map(layout.value_of, layout.variables))
        except InvalidArgumentError:
            pass  # the loop below asks again, one by one, to name the object that refused
        else:
            log.debug("reusing the previous save's layout")
            return values
    arrays: list[Any] = []
    if reason is None:
        at = 0  # the position in layout.keys of the entry's first key
        for entry in layout.entries:
            if not isinstance(entry, tuple):
                arrays.append(_variable_value(cast(VariableValue, entry), layout.keys[at]))
                at += 1
                continue
            obj, names, keys = entry
            at += len(keys)
            tensors = tensors_of(obj, keys[0].partition(f"/{OBJECT_ATTRIBUTES}/")[0] if keys else None)
            if len(tensors) != len(names) or list(tensors) != names:
                reason = f"a {type(obj).__name__} now names its tensors {list(tensors)}, not {names}"
                break
            arrays.extend(tensors.values())
    if reason is not None:
        log.debug("walking the objects: the previous save's layout does not hold: %s", reason)
        return None
    log.debug("reusing the previous save's layout")
    return arrays


def tensors_of(obj: Trackable, path: str | None) -> dict[str, Any]:
    """``obj._serialize_to_tensors()``; an :class:`InvalidArgumentError` it raises names the
    object by its ``path`` in the checkpoint (``error.key``), which the object itself does not know.

    (The save adds the checkpoint's prefix.)
    """
    try:
        return obj._serialize_to_tensors()
    except InvalidArgumentError as exc:
        raise cannot_save(exc, obj, path) from exc


def _variable_value(obj: VariableValue, key: str) -> Any:
    """``obj._tp_variable_value()``; an :class:`InvalidArgumentError` it raises names the object by
    its path in the checkpoint, as :func:`tensors_of` does (``key`` is its value's key)."""
    try:
        return obj._tp_variable_value()
    except InvalidArgumentError as exc:
        raise cannot_save(exc, obj, key.partition(f"/{OBJECT_ATTRIBUTES}/")[0]) from exc


def cannot_save(exc: InvalidArgumentError, obj: object, path: str | None) -> InvalidArgumentError:
    """``exc``, which ``obj`` raised offering its tensors, as the error that names it by its ``path``."""
    where = path if path is not None else f"a {type(obj).__name__}"
    return type(exc)(f"cannot save {where or '(root)'}: {exc}", key=path)


def _stale(layout: SaveLayout) -> str | None:
    if layout.epoch != structure_epoch():
        return "the structure changed since (an object gained, lost or replaced a child or a slot)"
    for container in layout.containers:
        if not container._tp_storage_unchanged():
            return f"a {type(container).__name__}'s storage was changed outside the wrapper"
    return None
