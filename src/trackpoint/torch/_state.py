"""Objects with ``state_dict()``/``load_state_dict()`` (schedulers, ``GradScaler``, data-loader
state, ...) as nodes: their tensors as values, the rest as JSON (``py_state``).

The state is taken whole: the stored JSON is decoded, every tensor it names looked up, and the
object's ``load_state_dict`` called with the rebuilt state; an error it raises is reported as
``InvalidArgumentError`` naming the object, before any variable or tensor owner of the restore
has taken its value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError
from trackpoint.protocol import PYTHON_STATE
from trackpoint.torch._json import TensorNames, decode, encode, tensor_name
from trackpoint.torch._tensors import as_array, new_tensor

__all__ = ["StateDictNode", "has_state_dict"]


def has_state_dict(obj: object) -> bool:
    """Whether ``obj`` follows the ``state_dict()``/``load_state_dict()`` protocol."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class StateDictNode(Trackable):
    """An object with ``state_dict()``/``load_state_dict()``; see the module docstring.

    Args:
        obj: The object (held strongly, as the checkpoint holds any object given to it).
        where: What it is called in messages (its name in the checkpoint).
    """

    def __init__(self, obj: Any, where: str) -> None:
        self.obj = obj
        self._where = where

    def __repr__(self) -> str:
        return f"<StateDictNode {self._where!r} of {type(self.obj).__name__}>"

    def _encoded(self) -> tuple[bytes, list[Any]]:
        return encode(self.obj.state_dict(), f"{self._where}.state_dict()")

    def _checkpoint_tensor_names(self) -> Sequence[str]:
        _, tensors = self._encoded()
        return TensorNames([PYTHON_STATE] + [tensor_name(i) for i in range(len(tensors))], PYTHON_STATE)

    def _serialize_to_tensors(self) -> dict[str, Any]:
        data, tensors = self._encoded()
        out: dict[str, Any] = {PYTHON_STATE: data}
        for i, tensor in enumerate(tensors):
            out[tensor_name(i)] = as_array(tensor, f"{self._where}.state_dict() tensor {i}")
        return out

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        # Not a TensorOwner: only the object's own load_state_dict can tell whether it takes
        # the state, so it runs where a refusal still leaves every variable and tensor owner
        # of the restore untouched (after their checks, before they take their values).
        def tensor(index: int) -> Any:
            value = restored_tensors.get(tensor_name(index))
            if value is None:
                raise InvalidArgumentError(
                    f"{self._where}: the stored state names tensor {index}, which the checkpoint does not hold"
                )
            return new_tensor(np.asarray(value))

        state = decode(restored_tensors[PYTHON_STATE], tensor, self._where)
        try:
            self.obj.load_state_dict(state)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise InvalidArgumentError(
                f"{self._where}: {type(self.obj).__name__}.load_state_dict refused the stored state: {exc!r}"
            ) from exc
