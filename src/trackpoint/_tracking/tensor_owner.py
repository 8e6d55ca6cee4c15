"""``TensorOwner``: how an object that keeps its tensors in memory of its own takes a restore.

Why: ``Trackable._restore_from_tensors`` takes values one object at a time, so an object
that accepts its values before a later one refuses its own leaves a restore half done, and
every value passes through new memory first. A framework adapter (``trackpoint.torch``)
holds tensors whose memory it can hand out to be written into, and checks values without
taking them. A trackable that implements this protocol is restored in three steps, with
``tp.Variable``'s guarantees:

1. :meth:`TensorOwner._tp_destinations`, asked before anything is read: the arrays a restore
   may read large values straight into (memory the object owns and nothing else reads
   meanwhile). A destination is handed back as its value, still holding the old bytes.
2. :meth:`TensorOwner._tp_check_restored`, once every value of the restore was read and
   verified: refuse a value (``InvalidArgumentError`` naming it) or return what to take.
   Nothing is changed yet; any refusal leaves every object of the restore as it was.
3. :meth:`TensorOwner._tp_take_restored`, once every object accepted: take the values
   (copy those that are not the destinations). The bytes of the values read in place land
   right after this step, before the restore returns.

A save asks a trackable for its tensors with ``_serialize_to_tensors()``. An owner whose only
tensor is a variable's value (``VARIABLE_VALUE``, as a torch parameter's node) may also define
``_tp_variable_value()``, returning that value: the save then forms its key and graph entry as
it does a ``tp.Variable``'s, without the dict and the name escaping (a tenth of the save of a
torch model of 20,000 parameters). The files are the same either way.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["TensorOwner", "is_tensor_owner", "is_tensor_owner_class"]


@runtime_checkable
class TensorOwner(Protocol):
    """A trackable restored all or nothing, large values straight into its memory (see the module docstring)."""

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        """Tensor name -> a writable, C-contiguous array of exactly the tensor's dtype and shape
        that the restore may overwrite; names left out are read into new memory."""
        ...

    def _tp_check_restored(self, tensors: dict[str, Any]) -> Any:
        """Check the values (tensor name -> array, or ``bytes``) without taking them; return
        what :meth:`_tp_take_restored` is to take.

        Raises:
            InvalidArgumentError: A value does not fit (dtype, shape, contents).
        """
        ...

    def _tp_take_restored(self, checked: Any) -> None:
        """Take what :meth:`_tp_check_restored` returned; must not fail."""
        ...


def is_tensor_owner(obj: object) -> bool:
    """Whether ``obj``'s class implements :class:`TensorOwner` (asked of the class: one lookup)."""
    return is_tensor_owner_class(type(obj))


def is_tensor_owner_class(cls: type) -> bool:
    """Whether instances of ``cls`` implement :class:`TensorOwner`."""
    return hasattr(cls, "_tp_check_restored")
