"""``ListWrapper``: a list whose trackable elements are checkpoint children ``"0"``, ``"1"``, … by index.

The wrapper keeps the user's own list as its storage, so a change made through either name
is one change, and keeps in its own ``list`` slots the contents it expects from the changes
it made itself; a save compares the two, so an edit made outside the wrapper makes the save
raise instead of silently leaving values out (C code that reads a ``list`` subclass's slots
directly sees the expected contents). Lists are append-only as far as checkpoints go:
replacing, deleting or reordering elements of a list that holds a trackable makes a later
save raise, because restore-on-create finds elements by position. The messages carry TF's
phrases, so code written against TF's errors keeps matching.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex

from trackpoint._tracking.base import NoDependency, Trackable
from trackpoint._tracking.epoch import structure_changed, trust_children
from trackpoint._tracking.wrapping import REMEDY, register, same, wrap_or_unwrap
from trackpoint.errors import InvalidArgumentError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = ["ListWrapper"]


class ListWrapper(Trackable, list):
    """A list whose trackable elements are checkpoint children named by index.

    Examples:
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
        if not self._tp_external and not same(self, self._tp_storage, list.__eq__):
            self._tp_mark_external()
        return not self._tp_external

    def _tp_mark_external(self) -> None:
        self._tp_external = True
        self._tp_snapshot = list.copy(self)
        self._tp_resync()
        structure_changed(self)

    def _tp_quick_check(self) -> None:
        """The O(1) part of the outside-change check, for appends (a save does the full one)."""
        if not self._tp_external and list.__len__(self) != len(self._tp_storage):
            self._tp_mark_external()

    def _tp_mark_non_append(self) -> None:
        if not self._tp_non_append:
            self._tp_non_append = True
            structure_changed(self)

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
                "restore-on-create finds elements by position, so tracked lists are append-only. " + REMEDY
            )
        if self._tp_external:
            raise InvalidArgumentError(
                f"Unable to save {self!r}, a list wrapper tracking trackable objects. The wrapped list was modified "
                f"outside the wrapper (through the wrapper it last held {self._tp_snapshot!r}), so what was added "
                "that way would be missing from the checkpoint. Change the list through the attribute it was "
                "assigned to (e.g. model.layers.append(x)). " + REMEDY
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


register(list, ListWrapper)
trust_children(ListWrapper)
