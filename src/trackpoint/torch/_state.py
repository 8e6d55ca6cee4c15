"""Objects with ``state_dict()``/``load_state_dict()`` (schedulers, ``GradScaler``, data-loader
state, ...) as nodes: their tensors as values, the rest as JSON (``py_state``).

The state is taken whole: a restore checks that the stored JSON decodes and that every tensor
it names is there before the object's ``load_state_dict`` is called with the rebuilt state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError
from trackpoint.torch._json import decode, encode
from trackpoint.torch._nodes import PYTHON_STATE
from trackpoint.torch._tensors import as_array, new_tensor

__all__ = ["StateDictNode", "has_state_dict"]


def has_state_dict(obj: object) -> bool:
    """Whether ``obj`` follows the ``state_dict()``/``load_state_dict()`` protocol."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _tensor_name(index: int) -> str:
    return f"tensor_{index}"


_TENSOR_NAME = re.compile(r"tensor_\d+")


class _TensorNames(Sequence[str]):
    """The state's tensor names now, which also contains every ``tensor_N``: a restore takes
    the tensors the checkpoint holds, however many the object holds before it is restored."""

    def __init__(self, names: list[str]) -> None:
        self._names = names

    def __getitem__(self, index: Any) -> Any:
        return self._names[index]

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name == PYTHON_STATE or (isinstance(name, str) and _TENSOR_NAME.fullmatch(name) is not None)


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
        return _TensorNames([PYTHON_STATE] + [_tensor_name(i) for i in range(len(tensors))])

    def _serialize_to_tensors(self) -> dict[str, Any]:
        data, tensors = self._encoded()
        out: dict[str, Any] = {PYTHON_STATE: data}
        for i, tensor in enumerate(tensors):
            out[_tensor_name(i)] = as_array(tensor, f"{self._where}.state_dict() tensor {i}")
        return out

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> Any:
        def tensor(index: int) -> Any:
            value = tensors.get(_tensor_name(index))
            if value is None:
                raise InvalidArgumentError(
                    f"{self._where}: the stored state names tensor {index}, which the checkpoint does not hold"
                )
            return new_tensor(np.asarray(value))

        return decode(tensors[PYTHON_STATE], tensor, self._where)

    def _tp_take_restored(self, checked: Any) -> None:
        self.obj.load_state_dict(checked)

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        self._tp_take_restored(self._tp_check_restored(restored_tensors))
