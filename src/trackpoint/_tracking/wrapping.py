"""Which values become container nodes: the one wrapping rule, for attributes and containers alike.

``list``, ``dict``/``OrderedDict`` (exact types: a ``Counter`` keeps its own logic) and tuples
holding something trackable are wrapped; ``tp.NoDependency`` is unwrapped; trackables and
everything else are left alone. The wrapper classes register themselves here
(:func:`register`) so that this module needs none of them; ``data_structures`` imports all
of them.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from trackpoint._tracking.base import NoDependency, Trackable

__all__ = ["REMEDY", "register", "same", "sticky_attribute_assignment", "wrap_or_unwrap"]

_WRAPPERS: dict[type, Callable[[Any], Trackable]] = {}  # exact type -> its wrapper class

#: The advice every error about an untrackable container ends with.
REMEDY = "If it need not be checkpointed, assign it wrapped in tp.NoDependency."


def register(kind: type, wrapper: Callable[[Any], Trackable]) -> None:
    """Wrap values of exactly type ``kind`` (``tuple``: only those holding something trackable) in ``wrapper``."""
    _WRAPPERS[kind] = wrapper


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
    wrapper = _WRAPPERS.get(type(value))
    if wrapper is not None and type(value) is not tuple:
        return wrapper(value)
    if isinstance(value, tuple) and tuple in _WRAPPERS and _should_wrap_tuple(value):
        return _WRAPPERS[tuple](value)
    return value


def sticky_attribute_assignment(owner: Trackable, name: str, value: Any) -> Any:
    """Wrap ``value`` and track it as ``owner``'s child ``name`` (in place if re-assigned)."""
    if isinstance(value, NoDependency):
        return value.value
    value = wrap_or_unwrap(value)
    if isinstance(value, Trackable):
        owner._track_trackable(value, name, overwrite=True)
    return value


def same(expected: Any, actual: Any, compare: Any) -> bool:
    """Whether the contents a wrapper expects are what its storage holds (any failing ``==`` counts as a change)."""
    try:
        return bool(compare(expected, actual))
    except Exception:  # noqa: BLE001 - an element whose == raises (an array, say) was replaced
        return False
