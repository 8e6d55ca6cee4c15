"""Every change to a container wrapper's children is reported to the structure epoch.

The save layout and the restore record are reused while the epoch stands still, so a
wrapper method that changes children without reporting would make a later save silently
leave a child out. The tables below classify every method the wrappers define; a method
added to a wrapper (or a mutating method added to ``list``/``dict`` by a new Python) that
is not classified here fails :func:`test_every_wrapper_method_is_classified`.
"""

from __future__ import annotations

import filecmp
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage import naming
from trackpoint._tracking.data_structures import DictWrapper, ListWrapper
from trackpoint._tracking.epoch import structure_epoch


def _v(value: float) -> tp.Variable:
    return tp.Variable(np.float32(value))


# name -> a call that changes the container's children (given the container, holding two variables)
_LIST_MUTATIONS: dict[str, Callable[[Any], object]] = {
    "append": lambda c: c.append(_v(9)),
    "extend": lambda c: c.extend([_v(9)]),
    "insert": lambda c: c.insert(0, _v(9)),
    "pop": lambda c: c.pop(0),
    "remove": lambda c: c.remove(c[0]),
    "clear": lambda c: c.clear(),
    "sort": lambda c: c.sort(key=lambda v: -float(v.numpy())),
    "reverse": lambda c: c.reverse(),
    "__setitem__": lambda c: c.__setitem__(0, _v(9)),
    "__delitem__": lambda c: c.__delitem__(0),
    "__iadd__": lambda c: c.__iadd__([_v(9)]),
    "__imul__": lambda c: c.__imul__(2),
}
_DICT_MUTATIONS: dict[str, Callable[[Any], object]] = {
    "__setitem__": lambda c: c.__setitem__("c", _v(9)),
    "__delitem__": lambda c: c.__delitem__("a"),
    "clear": lambda c: c.clear(),
    "pop": lambda c: c.pop("a"),
    "popitem": lambda c: c.popitem(),
    "setdefault": lambda c: c.setdefault("c", _v(9)),
    "update": lambda c: c.update(c=_v(9)),
    "__ior__": lambda c: c.__ior__({"c": _v(9)}),
}
# Methods that read, copy or build something new, and never change the wrapper's children.
_READ_ONLY = {
    "__add__",
    "__contains__",
    "__copy__",
    "__deepcopy__",
    "__eq__",
    "__ge__",
    "__getitem__",
    "__gt__",
    "__hash__",
    "__init__",
    "__iter__",
    "__le__",
    "__len__",
    "__lt__",
    "__mul__",
    "__ne__",
    "__or__",
    "__radd__",
    "__reduce_ex__",
    "__repr__",
    "__reversed__",
    "__rmul__",
    "__ror__",
    "__sizeof__",
    "_trackable_children",
    "copy",
    "count",
    "get",
    "index",
    "items",
    "keys",
    "values",
}
_NOT_METHODS = {"__annotations__", "__dict__", "__doc__", "__module__", "__weakref__"}


def _builtin_mutators(kind: type, frozen: type) -> set[str]:
    """The methods ``kind`` has and its read-only counterpart lacks, less the ones that only read."""
    return {
        name
        for name in set(vars(kind)) - set(dir(frozen))
        if name not in {"copy", "__reversed__", "fromkeys", "__class_getitem__"}
    }


@pytest.mark.parametrize(
    ("wrapper", "mutations", "builtin"),
    [
        (ListWrapper, _LIST_MUTATIONS, _builtin_mutators(list, tuple)),
        (DictWrapper, _DICT_MUTATIONS, _builtin_mutators(dict, types.MappingProxyType) | {"__ior__"}),
    ],
)
def test_every_wrapper_method_is_classified(wrapper: type, mutations: dict, builtin: set[str]) -> None:
    assert builtin <= set(mutations), f"mutating methods of the builtin with no test: {builtin - set(mutations)}"
    assert builtin <= set(vars(wrapper)), f"{wrapper.__name__} inherits a mutator: {builtin - set(vars(wrapper))}"
    own = {name for name in vars(wrapper) if not name.startswith("_tp_") and name not in _NOT_METHODS}
    unclassified = own - set(mutations) - _READ_ONLY
    assert not unclassified, (
        f"{wrapper.__name__} defines {sorted(unclassified)}: add each to the mutations "
        "above (with a call changing children) or to _READ_ONLY"
    )


def _files_equal(a: str, b: str) -> bool:
    return all(
        filecmp.cmp(name(a), name(b), shallow=False)
        for name in (naming.index_filename, lambda p: naming.data_filename(p, 0, 1))
    )


@pytest.mark.parametrize(
    ("name", "mutate", "make"),
    [
        *((name, call, lambda: [_v(1), _v(2)]) for name, call in _LIST_MUTATIONS.items()),
        *((name, call, lambda: {"a": _v(1), "b": _v(2)}) for name, call in _DICT_MUTATIONS.items()),
    ],
)
def test_a_mutation_that_changes_children_moves_the_epoch_and_the_next_save_is_fresh(
    tmp_path, name: str, mutate: Callable[[Any], object], make: Callable[[], Any]
) -> None:
    root = tp.Module()
    root.items = make()
    container = root.items
    ckpt = tp.Checkpoint(model=root)  # keeps its save layout
    ckpt.write(str(tmp_path / "before"))
    children = container._trackable_children()
    epoch = structure_epoch()
    mutate(container)
    try:
        after = container._trackable_children()
    except tp.errors.InvalidArgumentError:  # a non-append change of a list holding trackables
        after = None
    if after != children:
        assert structure_epoch() != epoch, f"{type(container).__name__}.{name} changed children unreported"
    ours, fresh = str(tmp_path / "ours"), str(tmp_path / "fresh")
    try:
        ckpt.write(ours)
    except tp.errors.InvalidArgumentError as exc:  # a non-append change of a list holding trackables
        with pytest.raises(tp.errors.InvalidArgumentError, match="non-append|NoDependency"):
            tp.Checkpoint(model=root).write(fresh)
        assert str(exc)
        return
    tp.Checkpoint(model=root).write(fresh)  # walks afresh
    assert _files_equal(ours, fresh), name
