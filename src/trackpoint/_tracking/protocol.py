"""The extension protocol: everything an object needs to live in a checkpoint's object graph.

Public as :mod:`trackpoint.protocol`. ``tp.Variable``, the optimizers, ``ShardedVariable``,
``split_dependency`` and the framework adapters (``trackpoint.torch``) are written against this
module alone, and so can any other: the graph layer knows no concrete class. A node is an
instance of a subclass of :class:`trackpoint.Trackable` (which carries the core's bookkeeping,
and the defaults below); every hook is a method of the node's class, looked up on the class
once per save or restore, so a class may leave any optional hook out.

A save (``Checkpoint.write``), in call order:

1. The object graph is walked breadth-first from the root: :meth:`Parent._trackable_children`
   of each node, in order (node ids and keys follow TensorFlow's). Slot variables come from
   the :class:`SlotOwner`\\ s among the nodes (:meth:`BulkSlots._tp_slots_of` when defined).
2. Each node offers its tensors, without copies: :meth:`VariableValue._tp_variable_value`
   when its class defines it (one ``VARIABLE_VALUE`` tensor, no dict), else
   :meth:`Saveable._serialize_to_tensors`, with :meth:`Saveable._checkpoint_full_name`.
   The arrays may be the node's own memory.
3. :meth:`AfterSave._tp_after_save` of every node that defines it, once every node offered its
   tensors (it may still refuse the save).
4. An async save (``enable_async``) takes its snapshot before returning: the arrays of nodes
   whose class sets :attr:`Saveable._tp_copy_on_write` are kept as they are, every other array
   is copied. A synchronous save writes the arrays offered, before returning.
5. The files are written and committed; the node hears nothing more.

A restore (``Checkpoint.read``/``restore``), in call order, all or nothing:

1. The checkpoint's graph is matched to live nodes from the root:
   :meth:`Parent._lookup_dependency` for each child the checkpoint names. A child the node
   lacks is told to the node after the restore succeeds, with
   :meth:`Parent._defer_restore` (restore-on-create: a :class:`PendingRestore`); slots the
   optimizer lacks are asked of :meth:`SlotOwner._create_or_restore_slot_variable`, also then.
2. Before any value is read, nodes that own memory offer it: for a large value,
   :meth:`ValueOwner._tp_destination` or :meth:`TensorOwner._tp_destinations` (the restore
   then reads the value straight into it; it is handed back as the value, still holding the
   old bytes).
3. Every value is read and its checksum verified, then each node checks its values without
   taking them: :meth:`ValueOwner._tp_check_value` or :meth:`TensorOwner._tp_check_restored`.
   Any refusal (``InvalidArgumentError``) ends the restore with no node changed.
4. Plain TensorFlow-style nodes (neither owner protocol) take theirs, in walk order, with
   :meth:`Saveable._restore_from_tensors`, which may still refuse; then every owner takes what
   its check returned: :meth:`ValueOwner._tp_take_value` or
   :meth:`TensorOwner._tp_take_restored` (which must not fail). Values read in place land in
   the offered memory right after this step.
5. Later, a child created under a node that was told of a pending value gets it when the node
   tracks it (:meth:`Parent._handle_deferred_dependencies`, :func:`restore_pending`), through
   the same steps; a node that refuses it leaves the value waiting for the next one.

A checkpoint without an object graph (TF1's ``Saver``) is restored by name instead: every
live node, slot variables included, is looked up among the checkpoint's keys by its global
name (:attr:`Saveable._tp_global_name`, :meth:`GlobalSlotNames._tp_slot_global_name`), then
steps 2-4 run as above. Each node that may gain children is told of the restore with
``_defer_restore(None, ...)``: every child it tracks from then on is restored by name too.

Examples:
    A node with two tensors of its own, restored all or nothing:

    >>> import numpy as np, tempfile, trackpoint as tp
    >>> from trackpoint import protocol
    >>> class Pair(tp.Trackable):
    ...     def __init__(self):
    ...         self.a, self.b = np.zeros(2), np.zeros(3)
    ...     def _checkpoint_tensor_names(self):
    ...         return ("a", "b")
    ...     def _serialize_to_tensors(self):
    ...         return {"a": self.a, "b": self.b}
    ...     def _tp_destinations(self):
    ...         return {}
    ...     def _tp_check_restored(self, tensors):
    ...         return {name: np.asarray(value) for name, value in tensors.items()}
    ...     def _tp_take_restored(self, checked):
    ...         self.a, self.b = checked["a"], checked["b"]
    >>> isinstance(Pair(), protocol.TensorOwner)
    True
    >>> saved = Pair()
    >>> saved.a[:] = 1.0
    >>> path = tp.Checkpoint(p=saved).write(tempfile.mkdtemp() + "/c")
    >>> restored = Pair()
    >>> _ = tp.Checkpoint(p=restored).read(path)
    >>> restored.a
    array([1., 1.])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from trackpoint._tracking.epoch import structure_changed, trust_children, trust_slots

if TYPE_CHECKING:
    from trackpoint._tracking.base import Trackable

__all__ = [
    "PYTHON_STATE",
    "VARIABLE_VALUE",
    "AfterSave",
    "BulkSlots",
    "GlobalSlotNames",
    "Parent",
    "PendingRestore",
    "Region",
    "Saveable",
    "SlotOwner",
    "TensorOwner",
    "ValueOwner",
    "VariableValue",
    "create_from_pending",
    "restore_pending",
    "structure_changed",
    "trust_children",
    "trust_slots",
]

#: The tensor name of a variable's value: ``<path>/.ATTRIBUTES/VARIABLE_VALUE``.
VARIABLE_VALUE = "VARIABLE_VALUE"
#: The tensor name of Python state (``tp.PythonState``, an adapter's JSON), as TF names it.
PYTHON_STATE = "py_state"

_T = TypeVar("_T", bound="Trackable")


@runtime_checkable
class PendingRestore(Protocol):
    """A checkpoint node waiting for a live object (the graph layer implements it; nodes receive it).

    Given to :meth:`Parent._defer_restore` for a child that does not exist yet, and to
    :meth:`SlotOwner._create_or_restore_slot_variable`.
    """

    @property
    def restore_uid(self) -> int:
        """Which restore it belongs to: a later restore has a larger one and wins."""
        ...

    def restore(self, trackable: Trackable) -> None:
        """Give ``trackable`` and its descendants their values, all or none: when one is refused,
        it raises with nothing assigned and the node still waiting."""
        ...

    def is_simple_variable(self) -> bool:
        """Whether the node holds one ``VARIABLE_VALUE`` and has no children."""
        ...

    def simple_variable_spec(self) -> tuple[tuple[int, ...], np.dtype] | None:
        """Shape and dtype of that value, from the index alone (no data read); None for strings."""
        ...

    def simple_variable_value(self, out: np.ndarray | None = None) -> Any:
        """That value, checksum verified: a new read-only array, or read into ``out`` (C-contiguous,
        writable, of :meth:`simple_variable_spec`'s dtype and shape) and returned."""
        ...

    def mark_restored(self, trackable: Trackable) -> None:
        """Note that ``trackable`` was made from this node's value (:meth:`simple_variable_value`),
        so the restore does not assign it a second time."""
        ...


@runtime_checkable
class Parent(Protocol):
    """How a node names its children (TF's methods; ``tp.Trackable`` implements them from what
    ``_track_trackable`` recorded). A class that computes its children its own way overrides the
    first two (a structure cache then walks it on every save, see :func:`trust_children`)."""

    def _trackable_children(self) -> dict[str, Trackable]:
        """The named children, in order (the order fixes node ids and the file's bytes)."""
        ...

    def _lookup_dependency(self, name: str) -> Trackable | None:
        """The child ``name``, or None when there is none now."""
        ...

    def _defer_restore(self, name: str | None, position: PendingRestore) -> None:
        """Remember a value waiting for the child ``name``, which does not exist yet; with
        ``name=None``, a name-based restore waiting for every child tracked from now on."""
        ...

    def _handle_deferred_dependencies(self, name: str, trackable: Trackable) -> None:
        """Give the newly made child ``name`` the values waiting for it (see :func:`restore_pending`);
        raises if it refuses them, which then keep waiting."""
        ...

    def _tp_has_pending(self, name: str | None = None) -> bool:
        """Whether values wait for the child ``name`` (for any child, when None)."""
        ...


@runtime_checkable
class Saveable(Protocol):
    """How a node offers its tensors (TF's tensor-callback methods).

    Attributes:
        _tp_copy_on_write: Class-level: True when the arrays it offers are never written in
            place afterwards (it installs new arrays instead), so an async save keeps them
            rather than copying them. False by default.
        _tp_global_name: Class-level: True when the node holds one ``VARIABLE_VALUE`` and
            :meth:`_checkpoint_full_name` is its global name (TF1's variable name, as
            ``tp.Variable(name=...)`` gives it), under which a name-based restore looks it up.
            False by default: the node's values are then reported as not restored.
    """

    _tp_copy_on_write: ClassVar[bool]
    _tp_global_name: ClassVar[bool]

    def _serialize_to_tensors(self) -> dict[str, Any]:
        """``{tensor name: array or bytes}`` to save, without copies."""
        ...

    def _checkpoint_tensor_names(self) -> Sequence[str]:
        """The names :meth:`_serialize_to_tensors` would return, without computing values; a
        restore gives the node those the checkpoint holds."""
        ...

    def _checkpoint_full_name(self) -> str:
        """``SerializedTensor.full_name``: a variable's name, else empty."""
        ...

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        """Check and take restored values at once (a node of neither owner protocol)."""
        ...


@runtime_checkable
class VariableValue(Protocol):
    """Optional, for a node whose one tensor is ``VARIABLE_VALUE``: the save asks for the value
    alone, without the dict and the name escaping (the files are the same either way).

    Attributes:
        _tp_value_fields: Class-level, optional: the names of the two plain instance attributes
            that hold what ``_checkpoint_full_name()`` and :meth:`_tp_variable_value` return
            (``("_name", "_value")`` for ``tp.Variable``), so that a save reads them without
            calling a method per variable (a model of 20,000 variables saves 5% faster); None,
            the default, calls the methods.
    """

    _tp_value_fields: ClassVar[tuple[str, str] | None]

    def _tp_variable_value(self) -> Any: ...


@runtime_checkable
class TensorOwner(Protocol):
    """A node restored all or nothing, large values straight into memory it owns (restore steps 2-4)."""

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        """Tensor name -> a writable, C-contiguous array of exactly the tensor's dtype and shape that
        the restore may overwrite (nothing else reads it meanwhile); names left out are read into
        new memory."""
        ...

    def _tp_check_restored(self, tensors: dict[str, Any]) -> Any:
        """Check the values (tensor name -> array, or ``bytes``) without taking them; return what
        :meth:`_tp_take_restored` is to take.

        Raises:
            InvalidArgumentError: A value does not fit (dtype, shape, contents).
        """
        ...

    def _tp_take_restored(self, checked: Any) -> None:
        """Take what :meth:`_tp_check_restored` returned; must not fail."""
        ...


@runtime_checkable
class ValueOwner(Protocol):
    """A :class:`TensorOwner` whose one tensor is ``VARIABLE_VALUE``, restored value by value
    (no dict per node: a model of many variables restores measurably faster).

    Attributes:
        _tp_takes_value: Class-level: True to be restored through the methods below (the
            core then also names its value by its checkpoint key alone).
    """

    _tp_takes_value: ClassVar[bool]

    def _tp_destination(self) -> np.ndarray | None:
        """Memory a large value may be read into (as :meth:`TensorOwner._tp_destinations`), or None."""
        ...

    def _tp_check_value(self, value: Any) -> Any:
        """Check the value without taking it; return what :meth:`_tp_take_value` is to take."""
        ...

    def _tp_take_value(self, checked: Any) -> None:
        """Take what :meth:`_tp_check_value` returned; must not fail."""
        ...


@runtime_checkable
class Region(Protocol):
    """Optional, for a :class:`ValueOwner` holding one block of a larger tensor (``ShardedVariable``):
    a restore reads only the stored slices that overlap the block."""

    def _tp_region(self) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        """The whole tensor's shape and the block's ``(start, stop)`` in each dimension."""
        ...


@runtime_checkable
class SlotOwner(Protocol):
    """An object keeping slot variables for other variables (an optimizer; TF's informal protocol).

    Its node in the graph lists ``(variable, slot name, slot)`` references; a restore gives each
    slot its value once both the variable and the optimizer are bound, in either order.
    """

    def get_slot_names(self) -> list[str]: ...

    def get_slot(self, var: Any, name: str) -> Trackable | None: ...

    def _create_or_restore_slot_variable(self, position: PendingRestore, variable: Any, slot_name: str) -> Any:
        """The slot to bind for ``(variable, slot_name)``: an existing one, one made now (from
        ``position``'s value, marked with :meth:`PendingRestore.mark_restored`), or None, keeping
        ``position`` to restore a slot made later."""
        ...


@runtime_checkable
class GlobalSlotNames(Protocol):
    """Optional, for a :class:`SlotOwner` whose slots TF1 saved by name (``<var>/Adam``): what a
    name-based restore looks each slot up by; without it, by the slot's own global name."""

    def _tp_slot_global_name(self, variable: Any, slot_name: str) -> str | None:
        """The TF1 name of ``variable``'s slot ``slot_name`` (None: it has none)."""
        ...


@runtime_checkable
class BulkSlots(Protocol):
    """Optional, for a :class:`SlotOwner` with many variables: its slots in one call, rather than
    ``get_slot`` for every object and slot name."""

    def _tp_slots_of(self, objects: Sequence[Any]) -> list[tuple[str, int, Trackable]]:
        """``(slot name, index in objects, slot)``: by slot name, then in the objects' order."""
        ...


@runtime_checkable
class AfterSave(Protocol):
    """Optional: told once every node of a save offered its tensors (save step 3)."""

    def _tp_after_save(self) -> None:
        """Raise (``InvalidArgumentError``) to refuse the save."""
        ...


def restore_pending(pending: list[PendingRestore], trackable: Trackable) -> None:
    """Give ``trackable`` the values waiting for it, latest restore first (earlier ones then skip it).

    Each position is taken out of ``pending`` once restored. If one raises (``trackable``
    refused its values), it and those not tried yet stay in ``pending``, for the caller to
    keep waiting for the next object made in ``trackable``'s place.
    """
    pending.sort(key=lambda p: p.restore_uid, reverse=True)
    while pending:
        pending[0].restore(trackable)
        del pending[0]


def create_from_pending(pending: Sequence[PendingRestore], make: Callable[[Any], _T], default: Any) -> _T:
    """Build an object whose initial value is the latest pending simple-variable value, if any.

    The object is marked as holding that restore's value (:meth:`PendingRestore.mark_restored`),
    so restoring it later does not assign it a second time.
    """
    simple = [p for p in pending if p.is_simple_variable()]
    if not simple:
        return make(default)
    latest = max(simple, key=lambda p: p.restore_uid)
    made = make(latest.simple_variable_value())
    latest.mark_restored(made)
    return made
