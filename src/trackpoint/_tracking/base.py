"""``Trackable``: an object with named children and tensors to checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar, cast

from trackpoint._tracking.epoch import structure_changed, trust_children
from trackpoint._tracking.protocol import PendingRestore, TensorOwner, create_from_pending, restore_pending
from trackpoint._tracking.shortcuts import inherit_shortcuts, is_tensor_owner
from trackpoint.errors import InvalidArgumentError

__all__ = ["NoDependency", "Trackable"]

_T = TypeVar("_T", bound="Trackable")


class NoDependency:
    """Wrap a value to store it on a trackable without tracking it.

    Examples:
        >>> import trackpoint as tp
        >>> m = tp.Module()
        >>> m.cache = tp.NoDependency([tp.Variable(1.0)])
        >>> type(m.cache).__name__, list(m._trackable_children())
        ('list', [])
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Trackable:
    """Base of everything a checkpoint can hold.

    Subclasses name their children with :meth:`_track_trackable` and expose tensors with
    the TF2 tensor-callback protocol: ``_serialize_to_tensors()`` returns ``{name: array}``
    and ``_restore_from_tensors({name: array})`` takes them back. A class implementing the
    two can checkpoint arbitrary state.

    Examples:
        >>> import numpy as np
        >>> import trackpoint as tp
        >>> class Counter(tp.Trackable):
        ...     def __init__(self):
        ...         self.count = 0
        ...     def _serialize_to_tensors(self):
        ...         return {"count": np.int64(self.count)}
        ...     def _restore_from_tensors(self, tensors):
        ...         self.count = int(tensors["count"])
        >>> int(Counter()._serialize_to_tensors()["count"])
        0
    """

    # Internal state lives under a _tp prefix and is created lazily, so subclasses need
    # not call ``super().__init__()``. The extension protocol (``trackpoint.protocol``) says
    # which of the _tp_ names a subclass may define; the rest are the core's.

    #: See ``protocol.Saveable``: the arrays offered to a save may change in place.
    _tp_copy_on_write: ClassVar[bool] = False
    #: See ``protocol.ValueOwner``: restored through the dict of ``TensorOwner`` or ``_restore_from_tensors``.
    _tp_takes_value: ClassVar[bool] = False
    #: See ``protocol.VariableValue``: no attributes the save may read for the methods.
    _tp_value_fields: ClassVar[tuple[str, str] | None] = None
    #: See ``protocol.Saveable``: no global name for a name-based restore to look up.
    _tp_global_name: ClassVar[bool] = False

    #: The restore that last assigned this object's values (a later restore wins).
    _tp_update_uid: int = -1
    #: Children and pending restores, made on first need (see ``_tp_state``). Read as an
    #: attribute with this class default, not through ``__dict__``: on CPython 3.11+ asking
    #: for an object's ``__dict__`` builds one, a new object per leaf for the collector.
    _tp: dict[str, Any] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        inherit_shortcuts(cls)

    def __getstate__(self) -> Any:
        """Pickled and deep-copied without the restores waiting on it: they hold a checkpoint's
        open reader, and a copy is a new object, which no restore reached."""
        state = self.__dict__.copy()
        held = state.get("_tp")
        if held is not None and (held["deferred"] or held.get("by_name") is not None):
            state["_tp"] = {"children": dict(held["children"]), "deferred": {}}
        slots = {
            name: getattr(self, name)
            for cls in type(self).__mro__
            for name in getattr(cls, "__slots__", ())
            if name not in ("__dict__", "__weakref__") and hasattr(self, name)
        }
        return (state, slots) if slots else state

    def _tp_state(self) -> dict[str, Any]:
        state = self._tp
        if state is None:
            state = {"children": {}, "deferred": {}}
            object.__setattr__(self, "_tp", state)
        return state

    # -- children -----------------------------------------------------------------------

    def _trackable_children(self) -> dict[str, Trackable]:
        """Named children in the order they were first tracked."""
        state = self._tp  # not _tp_state(): leaves need no state of their own
        return dict(state["children"]) if state is not None else {}

    def _lookup_dependency(self, name: str) -> Trackable | None:
        state = self._tp
        return state["children"].get(name) if state is not None else None

    def _track_trackable(self, trackable: Trackable, name: str, overwrite: bool = False) -> Trackable:
        """Make ``trackable`` the child ``name`` and give it any pending checkpoint value.

        Re-tracking a name keeps its position (as TF does) when ``overwrite`` is set.

        Raises:
            InvalidArgumentError: ``name`` already names another object and ``overwrite`` is False.
        """
        children = self._tp_state()["children"]
        current = children.get(name)
        if current is not None and current is not trackable and not overwrite:
            raise InvalidArgumentError(
                f"Called Trackable._track_trackable() with name={name!r}, but a Trackable with this "
                "name is already declared as a dependency. Names must be unique (or overwrite=True)."
            )
        children[name] = trackable
        structure_changed(self)
        try:
            self._handle_deferred_dependencies(name, trackable)
        except BaseException:
            # It refused a checkpoint value waiting for it (a wrong shape, say): not made a
            # child, so that value waits for the next object tracked under this name.
            if current is None:
                del children[name]
            else:
                children[name] = current
            structure_changed(self)
            raise
        return trackable

    def _untrack(self, name: str) -> None:
        if self._tp_state()["children"].pop(name, None) is not None:
            structure_changed(self)

    def _defer_restore(self, name: str | None, position: PendingRestore) -> None:
        """Remember a checkpoint node for the child ``name`` that does not exist yet; with
        ``name=None``, a name-based restore for every child tracked from now on."""
        state = self._tp_state()
        if name is None:
            # Only the latest: as in TF, a name-based restore marks every object it reaches as
            # restored by it, found in the checkpoint or not, so an earlier one never applies.
            state["by_name"] = position
        else:
            state["deferred"].setdefault(name, []).append(position)

    def _tp_has_pending(self, name: str | None = None) -> bool:
        """Whether values wait for the child ``name`` (for any child, when None)."""
        state = self._tp
        if state is None:
            return False
        if state.get("by_name") is not None:
            return True
        deferred = state["deferred"]
        return bool(deferred) if name is None else name in deferred

    def _handle_deferred_dependencies(self, name: str, trackable: Trackable) -> None:
        """Restore pending checkpoint values into a newly tracked child, latest restore first,
        then the latest name-based restore, which skips what a later restore assigned.

        Values the child refuses stay pending (see :func:`restore_pending`).
        """
        state = self._tp
        if state is None:
            return
        deferred = state["deferred"]
        pending = deferred.pop(name, None)
        if pending:
            try:
                restore_pending(pending, trackable)
            finally:
                if pending:
                    deferred.setdefault(name, [])[:0] = pending
        by_name = state.get("by_name")
        if by_name is not None:
            by_name.restore(trackable)

    def _add_variable(self, name: str, make: Callable[[Any], _T], default: Any) -> _T:
        """Create and track a variable child; a pending checkpoint value becomes its initial value.

        Args:
            name: The child's local name.
            make: Builds the variable from an initial value.
            default: The initial value when nothing is pending.
        """
        variable = create_from_pending(self._tp_state()["deferred"].get(name, ()), make, default)
        self._track_trackable(variable, name, overwrite=True)
        return variable

    # -- tensors ------------------------------------------------------------------------

    def _serialize_to_tensors(self) -> dict[str, Any]:
        """``{name: array}`` to save for this object; none by default."""
        return {}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        """Take back the tensors :meth:`_serialize_to_tensors` produced (a
        :class:`~trackpoint.protocol.TensorOwner` checks them, then takes them)."""
        if is_tensor_owner(self):
            owner = cast(TensorOwner, self)
            owner._tp_take_restored(owner._tp_check_restored(restored_tensors))

    def _checkpoint_tensor_names(self) -> Sequence[str]:
        """Names :meth:`_serialize_to_tensors` would return, without computing values."""
        return list(self._serialize_to_tensors())

    def _checkpoint_full_name(self) -> str:
        """``SerializedTensor.full_name``: the variable name for variables, else empty."""
        return ""


trust_children(Trackable)
