"""``Variable``: a named, numpy-backed, checkpointable value."""

from __future__ import annotations

import sys
import weakref
from typing import Any, ClassVar

import numpy as np

from trackpoint._format.dtypes import STRING, from_numpy
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import VARIABLE_VALUE
from trackpoint.errors import InvalidArgumentError

__all__ = ["Variable", "infer_value", "unshared_value"]

_TENSOR_NAMES = (VARIABLE_VALUE,)
_INT32 = np.iinfo(np.int32)


def _python_dtype(flat: list[Any]) -> np.dtype:
    """The dtype ``tf.constant`` infers for Python scalars: float32, int32 (int64 if needed), bool, string."""
    if any(isinstance(x, (str, bytes)) for x in flat):
        return np.dtype(object)
    if flat and all(isinstance(x, (bool, np.bool_)) for x in flat):
        return np.dtype(bool)
    if any(isinstance(x, complex) for x in flat):
        return np.dtype(np.complex128)
    if any(isinstance(x, float) for x in flat):
        return np.dtype(np.float32)
    if all(isinstance(x, int) for x in flat):
        if all(_INT32.min <= x <= _INT32.max for x in flat):
            return np.dtype(np.int32)
        return np.dtype(np.int64)
    return np.asarray(flat).dtype


def _flatten(value: Any) -> list[Any] | None:
    """Python scalars of a nested list/tuple, or None if ``value`` holds numpy data."""
    if isinstance(value, (list, tuple)):
        out: list[Any] = []
        for item in value:
            sub = _flatten(item)
            if sub is None:
                return None
            out.extend(sub)
        return out
    if isinstance(value, np.generic):
        return None  # np.float64 subclasses float, but numpy values keep their dtype
    if isinstance(value, (bool, int, float, complex, str, bytes)):
        return [value]
    return None


def _strings(value: Any) -> np.ndarray:
    array = np.array(value, dtype=object)
    flat = array.reshape(-1)
    for i, item in enumerate(flat):
        if isinstance(item, str):
            flat[i] = item.encode("utf-8")
        elif not isinstance(item, bytes):
            raise InvalidArgumentError(f"string tensor element {item!r} is not bytes or str")
    return array


def infer_value(value: Any, dtype: Any = None) -> np.ndarray:
    """Turn an initial value into a read-only numpy array with TF's dtype inference.

    Python floats become float32, ints int32 (int64 when too large), bools bool, str/bytes
    strings (object arrays of bytes); numpy values keep their dtype unless ``dtype`` is given.
    """
    if isinstance(value, Variable):
        value = value.numpy()
    if dtype is not None:
        target = np.dtype(dtype) if not (dtype is str or dtype is bytes or dtype == "string") else np.dtype(object)
    else:
        flat = _flatten(value)
        target = _python_dtype(flat) if flat is not None else np.asarray(value).dtype
    # A variable holds values in the machine's byte order, as a TF tensor does: a big-endian
    # float32 is a float32, compared, restored and saved like any other.
    target = _native(target)
    if target.kind in "OSU":
        array = _strings(value)
    else:
        if from_numpy(target) is None:
            raise InvalidArgumentError(f"dtype {target} cannot be checkpointed")
        source = np.asarray(value)
        if source.dtype.kind in "OSU":
            raise InvalidArgumentError(f"cannot make a {target} value from strings {value!r}")
        if _unwritable(source):
            # Nothing writes a read-only array that owns its memory (variables included: they
            # install new arrays), so it is shared rather than copied: a value a restore just
            # read for a variable created now (restore-on-create), another variable's numpy().
            array = np.asarray(source, dtype=target)
        else:
            array = np.array(source, dtype=target, copy=True)
    array.flags.writeable = False
    return array


def _unwritable(array: np.ndarray) -> bool:
    """Whether ``array`` is read-only and owns its memory (no writable array shares it)."""
    return not array.flags.writeable and array.flags.owndata and array.base is None


class Variable(Trackable):
    """A mutable tensor, checkpointed as ``<path>/.ATTRIBUTES/VARIABLE_VALUE``.

    Values are never modified in place: ``assign`` installs a new array. A save can
    therefore keep a reference to the current array as its snapshot, with no copy, while
    training goes on (copy-on-write). ``numpy()`` returns that read-only array (a numpy
    scalar for a scalar variable); copy it to modify it. The one exception is a restore,
    which reads a large value straight into the variable's array when nothing else holds
    that array (see :func:`unshared_value`): no array handed out ever changes.

    Args:
        initial_value: Array-like, Python scalar or nested list, ``bytes``/``str``.
        dtype: Optional dtype; else inferred as ``tf.Variable`` does (float → float32,
            int → int32, bool → bool, str/bytes → string; numpy values keep theirs).
        name: Stored as the checkpoint's ``full_name``; ``"Variable"`` by default.
        trainable: Whether ``Module.trainable_variables`` lists it.

    Examples:
        >>> import trackpoint as tp
        >>> v = tp.Variable([1.0, 2.0], name="w")
        >>> v.dtype, v.shape
        (dtype('float32'), (2,))
        >>> v.assign_add([1.0, 1.0]).numpy()
        array([2., 3.], dtype=float32)
    """

    def __init__(self, initial_value: Any, dtype: Any = None, name: str | None = None, trainable: bool = True) -> None:
        self._value = infer_value(initial_value, dtype)
        self._name = name if name is not None else "Variable"
        self._trainable = bool(trainable)

    # -- reading ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def trainable(self) -> bool:
        return self._trainable

    def numpy(self) -> Any:
        """The current value: a read-only array, a numpy scalar, or ``bytes`` for a string scalar."""
        return self._value[()] if self._value.ndim == 0 else self._value

    def read_value(self) -> np.ndarray:
        """The current value as a (read-only) array, 0-d for scalars."""
        return self._value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._value if dtype is None else self._value.astype(dtype)

    def __repr__(self) -> str:
        return f"<tp.Variable {self._name!r} shape={self.shape} dtype={self.dtype} numpy={self.numpy()!r}>"

    # -- writing ------------------------------------------------------------------------

    def _converted(self, value: Any, what: str) -> np.ndarray:
        if isinstance(value, Variable):
            value = value.read_value()
        given = np.asarray(value).dtype if isinstance(value, (np.ndarray, np.generic)) else None
        if given is not None and _native(given) != self.dtype and not (self.dtype == object and given.kind in "OSU"):
            raise InvalidArgumentError(
                f"cannot {what} a {given} value to variable {self._name!r} of dtype {self.dtype}; cast it first"
            )
        flat = _flatten(value)
        if flat is not None and self.dtype.kind in "iub" and any(isinstance(x, float) for x in flat):
            raise InvalidArgumentError(f"cannot {what} float values {value!r} to {self.dtype} variable {self._name!r}")
        try:
            array = infer_value(value, self.dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidArgumentError(f"cannot {what} {value!r} to variable {self._name!r}: {exc}") from exc
        if array.shape != self.shape:
            raise InvalidArgumentError(
                f"cannot {what} a value of shape {array.shape} to variable {self._name!r} of shape {self.shape}"
            )
        return array

    def assign(self, value: Any) -> Variable:
        """Replace the value (same shape and dtype); returns the variable."""
        self._value = self._converted(value, "assign")
        return self

    def assign_add(self, delta: Any) -> Variable:
        delta_array = self._converted(delta, "add")
        self._value = _frozen(np.add(self._value, delta_array, dtype=self.dtype))
        return self

    def assign_sub(self, delta: Any) -> Variable:
        delta_array = self._converted(delta, "subtract")
        self._value = _frozen(np.subtract(self._value, delta_array, dtype=self.dtype))
        return self

    # -- checkpointing: the extension protocol (trackpoint.protocol) ------------------

    #: Its arrays are never written in place (assign installs a new one): a save keeps them.
    _tp_copy_on_write: ClassVar[bool] = True
    #: Restored value by value (protocol.ValueOwner), not through a dict.
    _tp_takes_value: ClassVar[bool] = True
    #: What _checkpoint_full_name() and _tp_variable_value() return (protocol.VariableValue).
    _tp_value_fields: ClassVar[tuple[str, str] | None] = ("_name", "_value")
    #: Its name is TF's global variable name, which a name-based (TF1) restore looks up.
    _tp_global_name: ClassVar[bool] = True

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {VARIABLE_VALUE: self._value}

    def _tp_variable_value(self) -> Any:  # an array here; a subclass may offer a slice of one
        return self._value

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return _TENSOR_NAMES

    def _checkpoint_full_name(self) -> str:
        return self._name

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        self._value = self._tp_check_value(restored_tensors[VARIABLE_VALUE])

    def _tp_destination(self) -> np.ndarray | None:
        """Its array, when nothing else holds it (see :func:`unshared_value`), for a restore to read into."""
        return unshared_value(self)

    def _tp_check_value(self, value: Any) -> np.ndarray:
        """A checkpoint value (an array the variable may keep, or ``bytes``) as the read-only array to take.

        Apart from taking it (:meth:`_tp_take_value`) so that a restore can check every value
        before any variable takes one.

        Raises:
            InvalidArgumentError: Its dtype or shape is not the variable's.
        """
        array = (
            value
            if isinstance(value, np.ndarray)
            else np.asarray(value, dtype=object if isinstance(value, bytes) else None)
        )
        current = self._value
        if (array.dtype is not current.dtype and array.dtype != current.dtype) or array.shape != current.shape:
            message = (
                f"variable {self._name!r} is {_describe(self.dtype, self.shape)} but the checkpoint holds "
                f"{_describe(array.dtype, array.shape)}"
            )
            if array.shape != current.shape:  # TF's words, which tests written for TF match
                message += f": received incompatible tensor with shape {list(array.shape)}"
            raise InvalidArgumentError(message)
        if array.flags.writeable:  # else a view of the reader's read-only bytes
            array.flags.writeable = False
        return array

    def _tp_take_value(self, checked: np.ndarray) -> None:
        self._value = checked

    # The same as protocol.TensorOwner, for callers that hold a dict of tensors.

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        value = unshared_value(self)
        return {VARIABLE_VALUE: value} if value is not None else {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> np.ndarray:
        return self._tp_check_value(tensors[VARIABLE_VALUE])

    _tp_take_restored = _tp_take_value


def _value_and_refs(variable: Variable) -> tuple[np.ndarray, int]:
    """The variable's array and its reference count as seen here (the only place it is taken)."""
    value = variable._value
    return value, sys.getrefcount(value)


def _sole_refs() -> int | None:
    """What :func:`_value_and_refs` counts for an array that its variable alone holds.

    Counted on a variable made for the purpose rather than assumed: what a call's own
    references add differs between CPython versions. None where reference counts say
    nothing (an interpreter without them): no value is then ever overwritten in place.
    """
    if sys.implementation.name != "cpython" or not hasattr(sys, "getrefcount"):
        return None
    return _value_and_refs(Variable(np.zeros(1, np.float32)))[1]


def unshared_value(variable: Variable) -> np.ndarray | None:
    """The variable's array if nothing but the variable holds it, so a restore may overwrite it; else None.

    Copy-on-write (see :class:`Variable`) lets anyone keep the array they were given: a
    ``numpy()`` result, a view or memoryview of it (which holds it), an async save's
    snapshot. Any of those is one more reference, so the array is the variable's alone
    exactly when its reference count is what the variable's own attribute accounts for,
    and no weak reference could bring it back. It must also own its memory: an array over
    a reader's bytes (a small restored value) or over another array is never written.
    The caller (the restore) overwrites it before anything else can run on this thread;
    a thread reading the variable while a restore writes it may see the new value
    partly written, as with any in-place update.
    """
    if _SOLE_REFS is None:
        return None
    value, refs = _value_and_refs(variable)
    if (
        refs != _SOLE_REFS
        or type(value) is not np.ndarray
        or value.base is not None
        or not value.flags.owndata
        or value.dtype.hasobject
        or weakref.getweakrefcount(value)
    ):
        return None
    return value


def _frozen(value: Any) -> np.ndarray:
    """A read-only array (ufuncs return numpy scalars for 0-d inputs)."""
    array = value if isinstance(value, np.ndarray) else np.array(value)
    array.flags.writeable = False
    return array


def _native(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _describe(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    name = STRING.name if dtype == object else dtype.name
    return f"{name}{list(shape)}"


_SOLE_REFS = _sole_refs()  # last: making a variable needs the whole module
