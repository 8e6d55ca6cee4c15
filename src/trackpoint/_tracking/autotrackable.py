"""``AutoTrackable`` and ``Module``: attributes become checkpoint children as they are assigned."""

from __future__ import annotations

import re
from typing import Any

from trackpoint._tracking.base import Trackable
from trackpoint._tracking.data_structures import sticky_attribute_assignment
from trackpoint._tracking.variables import Variable
from trackpoint.errors import InvalidArgumentError

__all__ = ["AutoTrackable", "Module"]


class AutoTrackable(Trackable):
    """Tracks every trackable (or list/dict/tuple of them) assigned to an attribute.

    Children keep the order of first assignment; re-assigning a name keeps its place.
    Names starting with ``_tp`` are reserved.

    Examples:
        >>> import trackpoint as tp
        >>> obj = tp.AutoTrackable()
        >>> obj.b = tp.Variable(1.0)
        >>> obj.a = [tp.Variable(2.0)]
        >>> list(obj._trackable_children())
        ['b', 'a']
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_tp"):
            object.__setattr__(self, name, value)
            return
        value = sticky_attribute_assignment(self, name, value)
        if not isinstance(value, Trackable):
            # Unlike TF, overwriting a tracked attribute with a plain value stops tracking
            # the old object instead of saving it on silently.
            self._untrack(name)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._untrack(name)
        object.__delattr__(self, name)


def _camel_to_snake(name: str) -> str:
    return re.sub(r"((?<=[a-z0-9])[A-Z]|(?!^)[A-Z](?=[a-z]))", r"_\1", name).lower()


class Module(AutoTrackable):
    """A container of variables and sub-modules, like ``tf.Module``.

    Examples:
        >>> import trackpoint as tp
        >>> class Dense(tp.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.kernel = tp.Variable([[1.0]], name="kernel")
        ...         self.step = tp.Variable(0, trainable=False)
        >>> d = Dense()
        >>> d.name, [v.name for v in d.variables], [v.name for v in d.trainable_variables]
        ('dense', ['kernel', 'Variable'], ['kernel'])
    """

    def __init__(self, name: str | None = None) -> None:
        if name is None:
            name = _camel_to_snake(type(self).__name__)
        if not name.isidentifier():
            raise InvalidArgumentError(f"{name!r} is not a valid module name: use a Python identifier")
        object.__setattr__(self, "_tp_name", name)

    @property
    def name(self) -> str:
        return self.__dict__.get("_tp_name") or _camel_to_snake(type(self).__name__)

    def _walk(self) -> list[Trackable]:
        """Everything reachable through attributes, depth first by attribute name, once each."""
        seen: set[int] = {id(self)}
        out: list[Trackable] = []

        def visit(obj: Trackable) -> None:
            children = obj._trackable_children()
            keys = sorted(children) if isinstance(obj, Module) else list(children)
            for key in keys:
                child = children[key]
                if id(child) in seen:
                    continue
                seen.add(id(child))
                out.append(child)
                visit(child)

        visit(self)
        return out

    @property
    def variables(self) -> tuple[Variable, ...]:
        """Every variable of this module and its sub-modules."""
        return tuple(v for v in self._walk() if isinstance(v, Variable))

    @property
    def trainable_variables(self) -> tuple[Variable, ...]:
        return tuple(v for v in self.variables if v.trainable)

    @property
    def submodules(self) -> tuple[Module, ...]:
        return tuple(m for m in self._walk() if isinstance(m, Module))
