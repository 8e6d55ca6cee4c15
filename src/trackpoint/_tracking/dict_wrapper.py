"""``DictWrapper``: a dict whose string keys name its trackable values' checkpoint nodes.

Like ``ListWrapper``, it keeps the user's own dict as its storage and compares it, on a
save, with the contents it expects (see ``list_wrapper``); keys are escaped in checkpoint paths.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex

from trackpoint._tracking.base import NoDependency, Trackable
from trackpoint._tracking.epoch import structure_changed, trust_children
from trackpoint._tracking.wrapping import REMEDY, register, same, wrap_or_unwrap
from trackpoint.errors import InvalidArgumentError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = ["DictWrapper"]


class DictWrapper(Trackable, dict):
    """A dict whose trackable values are checkpoint children named by their (string) keys.

    Examples:
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
        if not self._tp_external and not same(self, self._tp_storage, dict.__eq__):
            self._tp_external = True
            self._tp_snapshot = dict.copy(self)
            dict.clear(self)
            dict.update(self, self._tp_storage)
            structure_changed(self)
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
                structure_changed(self)
        return value

    def _trackable_children(self) -> dict[str, Trackable]:
        self._tp_storage_unchanged()
        if self._tp_non_string_key is not None:
            raise InvalidArgumentError(
                f"Unable to save {self!r}, a dict wrapper tracking trackable objects: the trackable value under the "
                f"non-string key {self._tp_non_string_key[0]!r} has no checkpoint name. Use string keys for "
                "trackable values. " + REMEDY
            )
        if self._tp_external:
            raise InvalidArgumentError(
                f"Unable to save {self!r}, a dict wrapper tracking trackable objects. The wrapped dictionary was "
                f"modified outside the wrapper (through the wrapper it last held {self._tp_snapshot!r}), so what "
                "was changed that way would be wrong or missing in the checkpoint. Change the dict through the "
                "attribute it was assigned to (e.g. model.table[key] = x). " + REMEDY
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


register(dict, DictWrapper)
register(collections.OrderedDict, DictWrapper)
trust_children(DictWrapper)
