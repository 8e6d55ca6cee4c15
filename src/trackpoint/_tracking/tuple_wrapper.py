"""``TupleWrapper``: a tuple holding trackables, its elements children by index (a namedtuple's
also by field name, fields first)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, SupportsIndex

from trackpoint._tracking.base import NoDependency, Trackable
from trackpoint._tracking.epoch import trust_children
from trackpoint._tracking.wrapping import REMEDY, register, wrap_or_unwrap
from trackpoint.errors import InvalidArgumentError

__all__ = ["TupleWrapper"]


class TupleWrapper(Trackable):
    """Stands for a tuple (or namedtuple, or tuple subclass) that holds trackables.

    Python cannot weak-reference tuple subclasses, so the wrapper is no ``tuple`` itself. It
    reports the wrapped tuple's class as its ``__class__`` (``isinstance(w, tuple)`` and
    ``isinstance(w, MyNamedTuple)`` hold) and forwards everything else to the tuple: items,
    ``+``, ``*``, comparisons, hashing, fields, properties and methods. ``+=`` and ``*=``
    give new tuples, as they do for tuples.

    Examples:
        >>> import collections
        >>> import trackpoint as tp
        >>> Pair = collections.namedtuple("Pair", ["first", "second"])
        >>> m = tp.Module()
        >>> m.pair = Pair(tp.Variable(1.0), 2)
        >>> isinstance(m.pair, Pair), m.pair.second, list(m.pair._trackable_children())
        (True, 2, ['first', '0'])
    """

    _tp_wrapped: tuple

    def __init__(self, original: tuple = ()) -> None:
        depends = [not isinstance(v, NoDependency) for v in original]
        elements = [wrap_or_unwrap(v) for v in original]
        fields = getattr(original, "_fields", None) if isinstance(original, tuple) else None
        cls = type(original)
        self._tp_constructable = True
        try:
            wrapped = cls(**dict(zip(fields, elements))) if fields is not None else cls(elements)
        except TypeError:
            # A subclass whose __new__ takes other arguments: it cannot be rebuilt on restore.
            self._tp_constructable = False
            self._tp_wrapped = original
            return
        self._tp_wrapped = wrapped
        children = self._tp_state()["children"]
        if fields is not None:
            for name, depend, value in zip(fields, depends, wrapped):
                if depend and isinstance(value, Trackable):
                    children[name] = value
        for index, (depend, value) in enumerate(zip(depends, wrapped)):
            if depend and isinstance(value, Trackable):
                children[str(index)] = value

    def _trackable_children(self) -> dict[str, Trackable]:
        if not self._tp_constructable:
            fields = getattr(self._tp_wrapped, "_fields", ())
            raise InvalidArgumentError(
                f"Unable to save the tuple {self._tp_wrapped!r}: its class {type(self._tp_wrapped).__name__} is not "
                f"constructable from its _fields {fields!r} (its __new__ takes other arguments), so a restore could "
                "not rebuild it. Hold the values in an object that does not inherit from tuple. " + REMEDY
            )
        return Trackable._trackable_children(self)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(w, tuple) holds, as for the wrapped tuple
        return type(self._tp_wrapped)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_tp"):
            raise AttributeError(name)
        return getattr(self._tp_wrapped, name)

    def __getitem__(self, index: Any) -> Any:
        return self._tp_wrapped[index]

    def __len__(self) -> int:
        return len(self._tp_wrapped)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._tp_wrapped)

    def __reversed__(self) -> Iterator[Any]:
        return reversed(self._tp_wrapped)

    def __contains__(self, value: object) -> bool:
        return value in self._tp_wrapped

    def __add__(self, other: Any) -> tuple:
        return self._tp_wrapped + _tuple_of(other)

    def __radd__(self, other: Any) -> tuple:
        return _tuple_of(other) + self._tp_wrapped

    def __mul__(self, n: SupportsIndex) -> tuple:
        return self._tp_wrapped * n

    __rmul__ = __mul__

    def __iadd__(self, other: Any) -> tuple:
        return self._tp_wrapped + _tuple_of(other)  # a new tuple: tuples do not change in place

    def __imul__(self, n: SupportsIndex) -> tuple:
        return self._tp_wrapped * n

    def __eq__(self, other: object) -> bool:
        return self._tp_wrapped == _tuple_of(other)

    def __ne__(self, other: object) -> bool:
        return self._tp_wrapped != _tuple_of(other)

    def __lt__(self, other: Any) -> bool:
        return self._tp_wrapped < _tuple_of(other)

    def __le__(self, other: Any) -> bool:
        return self._tp_wrapped <= _tuple_of(other)

    def __gt__(self, other: Any) -> bool:
        return self._tp_wrapped > _tuple_of(other)

    def __ge__(self, other: Any) -> bool:
        return self._tp_wrapped >= _tuple_of(other)

    def __hash__(self) -> int:
        return hash(self._tp_wrapped)

    def __copy__(self) -> TupleWrapper:
        return TupleWrapper(copy.copy(self._tp_wrapped))

    def __deepcopy__(self, memo: dict) -> TupleWrapper:
        return TupleWrapper(copy.deepcopy(self._tp_wrapped, memo))

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple:
        return (TupleWrapper, (self._tp_wrapped,))

    def unwrap(self) -> tuple:
        """The tuple (or namedtuple) of the current elements."""
        return self._tp_wrapped

    def __repr__(self) -> str:
        return f"TupleWrapper({self._tp_wrapped!r})"


def _tuple_of(other: Any) -> Any:
    return other._tp_wrapped if type(other) is TupleWrapper else other


register(tuple, TupleWrapper)
trust_children(TupleWrapper)
