"""The dependencies a ``Checkpoint(root, **kwargs)`` attaches to its root, with a root held weakly.

``tp.Checkpoint(root=weakref.ref(obj))`` holds only the weak reference, as TF does: the
checkpoint never keeps the root alive, and saving or restoring once it is gone raises
:class:`~trackpoint.errors.DeadReferenceError`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from trackpoint._tracking.base import Trackable
from trackpoint._tracking.data_structures import wrap_or_unwrap
from trackpoint.errors import DeadReferenceError, InvalidArgumentError

__all__ = ["Attached", "attach", "deref"]

Held = Trackable | weakref.ref[Trackable]


def deref(held: Trackable | weakref.ref[Trackable]) -> Trackable:
    """The object itself, or the referent of a weakly held root (raising once it is gone).

    Examples:
        >>> import trackpoint as tp
        >>> root = tp.Module()
        >>> deref(weakref.ref(root)) is root
        True
    """
    if not isinstance(held, weakref.ref):
        return held
    obj = held()
    if obj is None:
        raise _dead_root_error()
    return obj


def _dead_root_error() -> DeadReferenceError:
    return DeadReferenceError(
        "The root of this Checkpoint was passed as a weak reference (Checkpoint(root=weakref.ref(obj))) and has "
        "been garbage-collected, so there is nothing to save or restore. Keep a reference to the root for as long as "
        "the Checkpoint is used, or pass the object itself."
    )


class Attached(Mapping[str, Trackable]):
    """The dependencies attached to a ``Checkpoint(root)``'s root, by name.

    A root given as a weak reference is held as that reference, its ``"root"`` self-edge
    included, and looked up on each use, so the checkpoint never keeps it alive.

    Examples:
        >>> import trackpoint as tp
        >>> root = tp.Module()
        >>> attached = Attached()
        >>> attached["root"] = weakref.ref(root)
        >>> attached["root"] is root
        True
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, Trackable | weakref.ref[Trackable]] = {}

    def __getitem__(self, name: str) -> Trackable:
        return deref(self._items[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setitem__(self, name: str, value: Trackable | weakref.ref[Trackable]) -> None:
        self._items[name] = value


def attach(root: Held | None, kwargs: dict[str, Any]) -> tuple[Held | None, Attached, list[tuple[str, Held]]]:
    """Check the arguments of ``Checkpoint(root, **kwargs)`` and lay them out as TF does.

    Returns:
        The root as held (the object, its weak reference, or None when the checkpoint is its
        own root); the dependencies to attach to it (those it does not have already); and
        each keyword, in sorted order, with what the checkpoint's attribute of that name
        holds (its container node for a list or dict; the weak reference for a weak root).

    Raises:
        InvalidArgumentError: An argument is not trackable (a dead weak reference
            included), or ``root`` already has another child of a keyword's name.

    Examples:
        >>> import trackpoint as tp
        >>> root, extra = tp.Module(), tp.Module()
        >>> held, attached, fields = attach(root, {"extra": extra})
        >>> held is root, list(attached), [name for name, _ in fields]
        (True, ['extra', 'root'], ['extra', 'root'])
    """
    attached = Attached()
    root_ref: weakref.ref[Trackable] | None = None
    graph_root: Any = root
    if isinstance(root, weakref.ref):
        root_ref, graph_root = root, root()
    if root is not None:
        if not isinstance(graph_root, Trackable):
            dead = " (the weak reference's object is gone)" if root_ref is not None and graph_root is None else ""
            raise InvalidArgumentError(
                f"`Checkpoint` was expecting root to be a trackable object (an object derived from `Trackable`), "
                f"got {graph_root!r}{dead}."
            )
        kwargs["root"] = graph_root
    fields: list[tuple[str, Held]] = []
    for name in sorted(kwargs):
        value = wrap_or_unwrap(kwargs[name])  # lists and dicts become container nodes, as in TF
        if not isinstance(value, Trackable):
            raise InvalidArgumentError(
                f"`Checkpoint` was expecting a trackable object (an object derived from `Trackable`) for "
                f"{name!r}, got {value!r}."
            )
        if graph_root is None:
            fields.append((name, value))
            continue
        held: Held = root_ref if name == "root" and root_ref is not None else value
        fields.append((name, held))
        existing = graph_root._lookup_dependency(name)
        if existing is None:
            attached[name] = held
        elif existing is not value:
            raise InvalidArgumentError(
                f"Cannot create a Checkpoint with keyword argument {name!r} if root.{name} already exists."
            )
    # None when the checkpoint is its own root: a reference to itself would be a cycle,
    # which keeps it and its variables alive until the garbage collector runs.
    return (root_ref if root_ref is not None else graph_root), attached, fields
