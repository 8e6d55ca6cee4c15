"""Lists, dicts and tuples assigned to trackables become container nodes, as in TF.

* ``ListWrapper``: trackable elements are children ``"0"``, ``"1"``, … by index.
* ``DictWrapper``: string keys are the children's names (escaped in checkpoint paths).
* ``TupleWrapper``: elements by index; a namedtuple's fields also by name (fields first).

A list or dict wrapper keeps the user's own object as its storage, so a change made through
either name is one change. Children are the trackables tracked when they entered the
container through the wrapper (TF's rule: ``tp.NoDependency`` elements are stored but never
tracked). The wrapper also keeps, in its own ``list``/``dict`` slots, the contents it
expects from the changes it made itself; a save compares that with the storage, so an edit
made outside the wrapper makes the save raise instead of silently leaving values out. C code
that reads a ``list``/``dict`` subclass's slots directly sees those expected contents.

Lists are append-only as far as checkpoints go: replacing, deleting or reordering elements
of a list that holds a trackable makes a later save raise, because restore-on-create finds
elements by position. The messages carry TF's phrases, so code written against TF's errors
keeps matching.
"""

from __future__ import annotations

import collections
import copy
import operator
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex

from trackpoint._tracking.base import NoDependency, Trackable
from trackpoint._tracking.epoch import structure_changed, trust_children

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time
from trackpoint.errors import InvalidArgumentError

__all__ = ["DictWrapper", "ListWrapper", "TupleWrapper", "sticky_attribute_assignment", "wrap_or_unwrap"]


def _should_wrap_tuple(value: tuple) -> bool:
    return any(
        isinstance(v, (NoDependency, Trackable))
        or type(v) in (list, dict, collections.OrderedDict)
        or (isinstance(v, tuple) and _should_wrap_tuple(v))
        for v in value
    )


def wrap_or_unwrap(value: Any) -> Any:
    """Wrap containers into trackable nodes; unwrap ``NoDependency``; leave the rest alone."""
    if isinstance(value, NoDependency):
        return value.value
    if isinstance(value, Trackable):
        return value
    if type(value) in (dict, collections.OrderedDict):  # exact types: a Counter keeps its own logic
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


def _same(expected: Any, actual: Any, compare: Any) -> bool:
    """Whether the contents a wrapper expects are what its storage holds (any failing ``==`` counts as a change)."""
    try:
        return bool(compare(expected, actual))
    except Exception:  # noqa: BLE001 - an element whose == raises (an array, say) was replaced
        return False


_REMEDY = "If it need not be checkpointed, assign it wrapped in tp.NoDependency."


class ListWrapper(Trackable, list):
    """A list whose trackable elements are checkpoint children named by index.

    Example:
        >>> import trackpoint as tp
        >>> layers = []
        >>> m = tp.Module()
        >>> m.layers = layers
        >>> m.layers.append(tp.Variable(1.0))
        >>> len(layers), list(m.layers._trackable_children())
        (1, ['0'])
    """

    _tp_non_append = False  # an element was replaced, deleted or moved (sticky, as in TF)
    _tp_external = False  # the storage was changed outside the wrapper (sticky)
    _tp_snapshot: list | None = None  # the expected contents when the outside change was found

    def __init__(self, wrapped_list: Iterable[Any] = ()) -> None:
        storage = wrapped_list if type(wrapped_list) is list else list(wrapped_list)
        self._tp_storage: list = storage
        children = self._tp_state()["children"]
        for index, value in enumerate(storage):
            wrapped = wrap_or_unwrap(value)
            if wrapped is not value:
                storage[index] = wrapped  # as in TF, the user's list now holds the wrapper
            if isinstance(wrapped, Trackable) and not isinstance(value, NoDependency):
                children[str(index)] = wrapped
        list.__init__(self, storage)

    # -- checks ---------------------------------------------------------------------------

    def _tp_storage_unchanged(self) -> bool:
        """Whether every change to the storage went through the wrapper (False once one did not)."""
        if not self._tp_external and not _same(self, self._tp_storage, list.__eq__):
            self._tp_mark_external()
        return not self._tp_external

    def _tp_mark_external(self) -> None:
        self._tp_external = True
        self._tp_snapshot = list.copy(self)
        self._tp_resync()
        structure_changed()

    def _tp_quick_check(self) -> None:
        """The O(1) part of the outside-change check, for appends (a save does the full one)."""
        if not self._tp_external and list.__len__(self) != len(self._tp_storage):
            self._tp_mark_external()

    def _tp_mark_non_append(self) -> None:
        if not self._tp_non_append:
            self._tp_non_append = True
            structure_changed()

    def _tp_non_append_if_tracking(self, *incoming: Any) -> None:
        """A non-append change: it breaks positions if the list (or what comes in) holds a trackable."""
        if not self._tp_non_append and any(isinstance(v, Trackable) for v in (*incoming, *self._tp_storage)):
            self._tp_mark_non_append()

    def _tp_resync(self) -> None:
        list.__setitem__(self, slice(None), self._tp_storage)

    def _tp_track(self, value: Any, index: int) -> Any:
        if isinstance(value, NoDependency):
            return value.value
        value = wrap_or_unwrap(value)
        if isinstance(value, Trackable):
            self._track_trackable(value, str(index), overwrite=True)
        return value

    def _trackable_children(self) -> dict[str, Trackable]:
        self._tp_storage_unchanged()
        if self._tp_non_append:
            raise InvalidArgumentError(
                f"Unable to save {self!r}, a list wrapper tracking trackable objects. A list element was replaced "
                "(__setitem__, __setslice__), deleted (__delitem__, __delslice__), or moved (sort), and "
                "restore-on-create finds elements by position, so tracked lists are append-only. " + _REMEDY
            )
        if self._tp_external:
            raise InvalidArgumentError(
                f"Unable to save {self!r}, a list wrapper tracking trackable objects. The wrapped list was modified "
                f"outside the wrapper (through the wrapper it last held {self._tp_snapshot!r}), so what was added "
                "that way would be missing from the checkpoint. Change the list through the attribute it was "
                "assigned to (e.g. model.layers.append(x)). " + _REMEDY
            )
        return Trackable._trackable_children(self)

    # -- changes --------------------------------------------------------------------------

    def append(self, value: Any) -> None:
        self._tp_quick_check()
        value = self._tp_track(value, len(self._tp_storage))
        self._tp_storage.append(value)
        list.append(self, value)

    def extend(self, values: Iterable[Any]) -> None:
        for value in list(values):  # a list extended by itself appends its old contents once
            self.append(value)

    def __iadd__(self, values: Iterable[Any]) -> Self:  # type: ignore[misc]
        self.extend(values)
        return self

    def __imul__(self, n: SupportsIndex) -> Self:
        count = operator.index(n)
        if count > 0:
            self.extend(self._tp_storage * (count - 1))  # appends, as in TF
            return self
        self._tp_storage_unchanged()
        self._tp_non_append_if_tracking()
        self._tp_storage.clear()
        self._tp_resync()
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        storage = self._tp_storage
        if isinstance(key, slice):
            self._tp_storage_unchanged()  # before the resync below, which would hide an outside change
            before = list(storage)
            storage[key] = value
            if any(isinstance(v, Trackable) for v in before):
                self._tp_mark_non_append()
            for index in range(len(storage)):
                if index >= len(before) or storage[index] is not before[index]:
                    storage[index] = self._tp_track(storage[index], index)
            self._tp_resync()
            return
        self._tp_quick_check()
        index = operator.index(key)
        old = storage[index]  # IndexError as for a list
        if index < 0:
            index += len(storage)  # TF names such an element "-1", under which no restore finds it
        if isinstance(old, Trackable):
            self._tp_mark_non_append()
        value = self._tp_track(value, index)
        storage[index] = value
        list.__setitem__(self, index, value)

    def __delitem__(self, key: Any) -> None:
        self._tp_storage_unchanged()
        self._tp_non_append_if_tracking()
        del self._tp_storage[key]
        self._tp_resync()

    def insert(self, index: SupportsIndex, value: Any) -> None:
        self._tp_storage_unchanged()
        value = wrap_or_unwrap(value)
        self._tp_non_append_if_tracking(value)
        self._tp_storage.insert(index, value)
        self._tp_resync()

    def pop(self, index: SupportsIndex = -1) -> Any:
        value = self._tp_storage[index]
        del self[index]
        return value

    def remove(self, value: Any) -> None:
        del self[self._tp_storage.index(value)]

    def clear(self) -> None:
        del self[:]

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        self._tp_storage_unchanged()
        self._tp_non_append_if_tracking()
        self._tp_storage.sort(key=key, reverse=reverse)
        self._tp_resync()

    def reverse(self) -> None:
        self._tp_storage_unchanged()
        storage, n = self._tp_storage, len(self._tp_storage)
        moving = storage[: n // 2] + storage[(n + 1) // 2 :]  # the middle of an odd-length list stays put
        if any(isinstance(v, Trackable) for v in moving):
            self._tp_mark_non_append()
        storage.reverse()
        self._tp_resync()

    # -- reads: from the storage ----------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        return self._tp_storage[key]

    def __len__(self) -> int:
        return len(self._tp_storage)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._tp_storage)

    def __reversed__(self) -> Iterator[Any]:
        return reversed(self._tp_storage)

    def __contains__(self, value: object) -> bool:
        return value in self._tp_storage

    def index(self, value: Any, *args: Any) -> int:
        return self._tp_storage.index(value, *args)

    def count(self, value: Any) -> int:
        return self._tp_storage.count(value)

    def __add__(self, other: Any) -> list:
        return self._tp_storage + _list_of(other)

    def __radd__(self, other: Any) -> list:
        return _list_of(other) + self._tp_storage

    def __mul__(self, n: SupportsIndex) -> list:
        return self._tp_storage * n

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return self._tp_storage == _list_of(other)

    def __ne__(self, other: object) -> bool:
        return self._tp_storage != _list_of(other)

    def __lt__(self, other: Any) -> bool:
        return self._tp_storage < _list_of(other)

    def __le__(self, other: Any) -> bool:
        return self._tp_storage <= _list_of(other)

    def __gt__(self, other: Any) -> bool:
        return self._tp_storage > _list_of(other)

    def __ge__(self, other: Any) -> bool:
        return self._tp_storage >= _list_of(other)

    __hash__ = None

    def copy(self) -> ListWrapper:
        return self.__copy__()

    def __copy__(self) -> ListWrapper:
        copied = ListWrapper(list(self._tp_storage))
        copied._tp_non_append, copied._tp_external = self._tp_non_append, self._tp_external
        return copied

    def __deepcopy__(self, memo: dict) -> ListWrapper:
        copied = ListWrapper(copy.deepcopy(self._tp_storage, memo))
        copied._tp_non_append, copied._tp_external = self._tp_non_append, self._tp_external
        return copied

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple:
        return (ListWrapper, (self._tp_storage,))

    def __sizeof__(self) -> int:
        return list.__sizeof__(self) + self._tp_storage.__sizeof__()  # the expected contents and the storage

    def __repr__(self) -> str:
        return f"ListWrapper({self._tp_storage!r})"


def _list_of(other: Any) -> Any:
    return other._tp_storage if isinstance(other, ListWrapper) else other


class DictWrapper(Trackable, dict):
    """A dict whose trackable values are checkpoint children named by their (string) keys.

    Example:
        >>> import trackpoint as tp
        >>> table = {}
        >>> m = tp.Module()
        >>> m.table = table
        >>> m.table["w"] = tp.Variable(1.0)
        >>> list(table), list(m.table._trackable_children())
        (['w'], ['w'])
    """

    _tp_non_string_key: Any = None  # the first non-string key of a tracked value (None: none)
    _tp_external = False
    _tp_snapshot: dict | None = None

    def __init__(self, wrapped_dict: Any = None) -> None:
        if wrapped_dict is None:
            wrapped_dict = {}
        own = isinstance(wrapped_dict, dict) and not isinstance(wrapped_dict, DictWrapper)
        storage = wrapped_dict if own else dict(wrapped_dict)
        self._tp_storage: dict = storage
        for key, value in list(storage.items()):
            wrapped = self._tp_track(key, value)
            if wrapped is not value:
                storage[key] = wrapped
        dict.update(self, storage)

    # -- checks ---------------------------------------------------------------------------

    def _tp_storage_unchanged(self) -> bool:
        """Whether every change to the storage went through the wrapper (False once one did not)."""
        if not self._tp_external and not _same(self, self._tp_storage, dict.__eq__):
            self._tp_external = True
            self._tp_snapshot = dict.copy(self)
            dict.clear(self)
            dict.update(self, self._tp_storage)
            structure_changed()
        return not self._tp_external

    def _tp_track(self, key: Any, value: Any) -> Any:
        if isinstance(value, NoDependency):
            return value.value
        value = wrap_or_unwrap(value)
        if isinstance(value, Trackable):
            if isinstance(key, str):
                self._track_trackable(value, key, overwrite=True)
            elif self._tp_non_string_key is None:
                self._tp_non_string_key = (key,)
                structure_changed()
        return value

    def _trackable_children(self) -> dict[str, Trackable]:
        self._tp_storage_unchanged()
        if self._tp_non_string_key is not None:
            raise InvalidArgumentError(
                f"Unable to save {self!r}, a dict wrapper tracking trackable objects: the trackable value under the "
                f"non-string key {self._tp_non_string_key[0]!r} has no checkpoint name. Use string keys for "
                "trackable values. " + _REMEDY
            )
        if self._tp_external:
            raise InvalidArgumentError(
                f"Unable to save {self!r}, a dict wrapper tracking trackable objects. The wrapped dictionary was "
                f"modified outside the wrapper (through the wrapper it last held {self._tp_snapshot!r}), so what "
                "was changed that way would be wrong or missing in the checkpoint. Change the dict through the "
                "attribute it was assigned to (e.g. model.table[key] = x). " + _REMEDY
            )
        return Trackable._trackable_children(self)

    # -- changes (a removed value stays tracked under its key, as in TF) ------------------

    def __setitem__(self, key: Any, value: Any) -> None:
        if not self._tp_external and dict.__len__(self) != len(self._tp_storage):
            self._tp_storage_unchanged()  # the O(1) part of the outside-change check; a save does all of it
        value = self._tp_track(key, value)
        self._tp_storage[key] = value
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        del self._tp_storage[key]
        if dict.pop(self, key, _MISSING) is _MISSING:
            self._tp_storage_unchanged()  # the key came in from outside

    def pop(self, key: Any, *default: Any) -> Any:
        if key not in self._tp_storage:
            if default:
                return default[0]
            raise KeyError(key)
        value = self._tp_storage[key]
        del self[key]
        return value

    def popitem(self) -> tuple[Any, Any]:
        if not self._tp_storage:
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(self._tp_storage))
        return key, self.pop(key)

    def clear(self) -> None:
        for key in list(self._tp_storage):
            del self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self._tp_storage:
            self[key] = default
        return self._tp_storage[key]

    def __ior__(self, other: Any) -> Self:
        self.update(other)
        return self

    # -- reads: from the storage ----------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        return self._tp_storage[key]

    def get(self, key: Any, default: Any = None) -> Any:
        return self._tp_storage.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._tp_storage

    def __iter__(self) -> Iterator[Any]:
        return iter(self._tp_storage)

    def __reversed__(self) -> Iterator[Any]:
        return reversed(self._tp_storage)

    def __len__(self) -> int:
        return len(self._tp_storage)

    def keys(self) -> Any:
        return self._tp_storage.keys()

    def values(self) -> Any:
        return self._tp_storage.values()

    def items(self) -> Any:
        return self._tp_storage.items()

    def __or__(self, other: Any) -> dict:
        return {**self._tp_storage, **_dict_of(other)}

    def __ror__(self, other: Any) -> dict:
        return {**_dict_of(other), **self._tp_storage}

    def __eq__(self, other: object) -> bool:
        return self._tp_storage == _dict_of(other)

    def __ne__(self, other: object) -> bool:
        return self._tp_storage != _dict_of(other)

    __hash__ = None

    def copy(self) -> DictWrapper:
        return self.__copy__()

    def __copy__(self) -> DictWrapper:
        copied = DictWrapper(copy.copy(self._tp_storage))
        copied._tp_external, copied._tp_non_string_key = self._tp_external, self._tp_non_string_key
        return copied

    def __deepcopy__(self, memo: dict) -> DictWrapper:
        copied = DictWrapper(copy.deepcopy(self._tp_storage, memo))
        copied._tp_external, copied._tp_non_string_key = self._tp_external, self._tp_non_string_key
        return copied

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple:
        return (DictWrapper, (self._tp_storage,))

    def __sizeof__(self) -> int:
        return dict.__sizeof__(self) + self._tp_storage.__sizeof__()

    def __repr__(self) -> str:
        return f"DictWrapper({self._tp_storage!r})"


_MISSING = object()


def _dict_of(other: Any) -> Any:
    return other._tp_storage if isinstance(other, DictWrapper) else other


class TupleWrapper(Trackable):
    """Stands for a tuple (or namedtuple, or tuple subclass) that holds trackables.

    Python cannot weak-reference tuple subclasses, so the wrapper is no ``tuple`` itself. It
    reports the wrapped tuple's class as its ``__class__`` (``isinstance(w, tuple)`` and
    ``isinstance(w, MyNamedTuple)`` hold) and forwards everything else to the tuple: items,
    ``+``, ``*``, comparisons, hashing, fields, properties and methods. ``+=`` and ``*=``
    give new tuples, as they do for tuples.

    Example:
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
                "not rebuild it. Hold the values in an object that does not inherit from tuple. " + _REMEDY
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


for _wrapper in (ListWrapper, DictWrapper, TupleWrapper):
    trust_children(_wrapper)
