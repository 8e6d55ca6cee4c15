"""Lists, dicts and tuples assigned to trackables become container nodes, named like TF's.

* ``ListWrapper``: trackable elements are children ``"0"``, ``"1"``, … by index.
* ``DictWrapper``: string keys are the children's names (escaped in checkpoint paths).
* ``TupleWrapper``: elements by index; a namedtuple's fields also by name (fields first).

Containers are append-only as far as checkpoints go: replacing, deleting or reordering a
trackable element makes a later save raise ``ValueError``, because restore-on-create
relies on positions staying put. Unlike TF, the wrapper holds its own copy: changing the
original list after the assignment does not change the wrapper.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any, SupportsIndex

from trackpoint._tracking.base import NoDependency, Trackable, structure_changed

__all__ = ["DictWrapper", "ListWrapper", "TupleWrapper", "sticky_attribute_assignment", "wrap_or_unwrap"]


def _should_wrap_tuple(value: tuple) -> bool:
    return any(isinstance(v, (Trackable, list, dict)) or (isinstance(v, tuple) and _should_wrap_tuple(v)) for v in value)


def wrap_or_unwrap(value: Any) -> Any:
    """Wrap containers into trackable nodes; unwrap ``NoDependency``; leave the rest alone."""
    if isinstance(value, NoDependency):
        return value.value
    if isinstance(value, Trackable):
        return value
    if type(value) in (dict, collections.OrderedDict):
        return DictWrapper(value)
    if type(value) is list:
        return ListWrapper(value)
    if isinstance(value, tuple) and _should_wrap_tuple(value):
        return TupleWrapper(value)
    return value


def sticky_attribute_assignment(owner: Trackable, name: str, value: Any) -> Any:
    """Wrap ``value`` and track it as ``owner``'s child ``name`` (in place if re-assigned)."""
    if isinstance(value, NoDependency):
        return value.value
    value = wrap_or_unwrap(value)
    if isinstance(value, Trackable):
        owner._track_trackable(value, name, overwrite=True)
    return value


_MUTATION_ERROR = (
    "Unable to save {what}: an element was replaced, deleted or moved. Tracking is append-only so that "
    "values can be restored into objects as they are created. Wrap the container in tp.NoDependency if it "
    "should not be checkpointed."
)


class ListWrapper(Trackable, list):
    """A list whose trackable elements are checkpoint children named by index."""

    def __init__(self, values: Iterable[Any] = ()) -> None:
        list.__init__(self, (wrap_or_unwrap(v) for v in values))
        self._non_append_mutation = False

    def _trackable_children(self) -> dict[str, Trackable]:
        self._check_append_only()
        return {str(i): v for i, v in enumerate(self) if isinstance(v, Trackable)}

    def _tp_trackables(self) -> list[Trackable]:
        """The children :meth:`_trackable_children` names, without making their names."""
        self._check_append_only()
        return [v for v in self if isinstance(v, Trackable)]

    def _check_append_only(self) -> None:
        if self._non_append_mutation:
            raise ValueError(_MUTATION_ERROR.format(what=f"the list {list.__repr__(self)}"))

    def _lookup_dependency(self, name: str) -> Trackable | None:
        if not name.isdigit():
            return None
        index = int(name)
        value = list.__getitem__(self, index) if index < len(self) else None
        return value if isinstance(value, Trackable) else None

    def _appended(self, start: int) -> None:
        for index in range(start, len(self)):
            value = list.__getitem__(self, index)
            if isinstance(value, Trackable):
                self._handle_deferred_dependencies(str(index), value)

    def _touches_trackables(self, *values: Any) -> None:
        if any(isinstance(v, Trackable) for v in values):
            self._non_append_mutation = True

    def append(self, value: Any) -> None:
        structure_changed()
        list.append(self, wrap_or_unwrap(value))
        self._appended(len(self) - 1)

    def extend(self, values: Iterable[Any]) -> None:
        structure_changed()
        start = len(self)
        list.extend(self, (wrap_or_unwrap(v) for v in values))
        self._appended(start)

    def __iadd__(self, values: Iterable[Any]) -> ListWrapper:  # type: ignore[override,misc]
        self.extend(values)
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        structure_changed()
        if isinstance(key, slice):
            self._touches_trackables(*list.__getitem__(self, key), *value)
            list.__setitem__(self, key, [wrap_or_unwrap(v) for v in value])
            return
        old = list.__getitem__(self, key)
        value = wrap_or_unwrap(value)
        if old is not value:
            self._touches_trackables(old)
        list.__setitem__(self, key, value)
        if isinstance(value, Trackable) and not self._non_append_mutation:
            self._handle_deferred_dependencies(str(key % len(self)), value)

    def __delitem__(self, key: Any) -> None:
        structure_changed()
        removed = list.__getitem__(self, key)
        self._touches_trackables(*(removed if isinstance(key, slice) else [removed]))
        list.__delitem__(self, key)

    def insert(self, index: SupportsIndex, value: Any) -> None:
        structure_changed()
        self._touches_trackables(*list.__getitem__(self, slice(index, None)), value)
        list.insert(self, index, wrap_or_unwrap(value))

    def pop(self, index: SupportsIndex = -1) -> Any:
        structure_changed()
        value = list.pop(self, index)
        self._touches_trackables(value)
        return value

    def remove(self, value: Any) -> None:
        structure_changed()
        self._touches_trackables(value)
        list.remove(self, value)

    def clear(self) -> None:
        structure_changed()
        self._touches_trackables(*self)
        list.clear(self)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        structure_changed()
        self._touches_trackables(*self)
        list.sort(self, *args, **kwargs)

    def reverse(self) -> None:
        structure_changed()
        self._touches_trackables(*self)
        list.reverse(self)

    def __imul__(self, n: SupportsIndex) -> ListWrapper:  # type: ignore[override,misc]
        structure_changed()
        self._touches_trackables(*self)
        list.__imul__(self, n)
        return self

    def __eq__(self, other: object) -> bool:
        return list.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ListWrapper({list.__repr__(self)})"


class DictWrapper(Trackable, dict):
    """A dict whose trackable values are checkpoint children named by their (string) keys."""

    def __init__(self, values: Any = ()) -> None:
        dict.__init__(self)
        for key, value in dict(values).items():
            self[key] = value

    def _trackable_children(self) -> dict[str, Trackable]:
        children = {}
        for key, value in self.items():
            if isinstance(value, Trackable):
                if not isinstance(key, str):
                    raise ValueError(
                        f"Unable to save the dict {dict.__repr__(self)}: the trackable value under the non-string key "
                        f"{key!r} has no checkpoint name. Use string keys, or wrap the dict in tp.NoDependency."
                    )
                children[key] = value
        return children

    def _lookup_dependency(self, name: str) -> Trackable | None:
        value = self.get(name)
        return value if isinstance(value, Trackable) else None

    def __setitem__(self, key: Any, value: Any) -> None:
        structure_changed()
        if isinstance(value, NoDependency):
            dict.__setitem__(self, key, value.value)
            return
        value = wrap_or_unwrap(value)
        dict.__setitem__(self, key, value)
        if isinstance(key, str) and isinstance(value, Trackable):
            self._handle_deferred_dependencies(key, value)

    def __delitem__(self, key: Any) -> None:
        structure_changed()
        dict.__delitem__(self, key)

    def pop(self, *args: Any) -> Any:
        structure_changed()
        return dict.pop(self, *args)

    def popitem(self) -> tuple[Any, Any]:
        structure_changed()
        return dict.popitem(self)

    def clear(self) -> None:
        structure_changed()
        dict.clear(self)

    def __ior__(self, other: Any) -> DictWrapper:  # type: ignore[override,misc]
        self.update(other)
        return self

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __eq__(self, other: object) -> bool:
        return dict.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DictWrapper({dict.__repr__(self)})"


class TupleWrapper(Trackable):
    """An immutable sequence standing for a tuple (or namedtuple) that holds trackables.

    Python cannot weak-reference tuple subclasses, so this is a ``Sequence`` rather than a
    ``tuple``: indexing, iteration, unpacking, equality with tuples and namedtuple field
    access work; ``isinstance(x, tuple)`` does not.
    """

    def __init__(self, values: tuple) -> None:
        self._values = tuple(wrap_or_unwrap(v) for v in values)
        self._fields: tuple[str, ...] = tuple(getattr(values, "_fields", ()))
        self._original_type = type(values)

    def _trackable_children(self) -> dict[str, Trackable]:
        children: dict[str, Trackable] = {}
        for name, value in zip(self._fields, self._values):
            if isinstance(value, Trackable):
                children[name] = value
        for index, value in enumerate(self._values):
            if isinstance(value, Trackable):
                children[str(index)] = value
        return children

    def _lookup_dependency(self, name: str) -> Trackable | None:
        return self._trackable_children().get(name)

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("_fields", ())
        if name in fields:
            return self._values[fields.index(name)]
        raise AttributeError(name)

    def __getitem__(self, index: Any) -> Any:
        return self._values[index]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Any:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TupleWrapper):
            return self._values == other._values
        return isinstance(other, tuple) and self._values == tuple(other)

    def __hash__(self) -> int:
        return hash(self._values)

    def unwrap(self) -> tuple:
        """The tuple (or namedtuple) of the current elements."""
        if self._fields:
            return self._original_type(*self._values)
        return tuple(self._values)

    def __repr__(self) -> str:
        return f"TupleWrapper({self.unwrap()!r})"
