"""``PythonState``: checkpoint Python-side state as a string (``<path>/.ATTRIBUTES/py_state``)."""

from __future__ import annotations

import abc
from typing import Any

from trackpoint._tracking.base import Trackable

__all__ = ["PYTHON_STATE", "PythonState"]

PYTHON_STATE = "py_state"


class PythonState(Trackable, metaclass=abc.ABCMeta):
    """Subclass and implement ``serialize() -> bytes | str`` and ``deserialize(bytes)``.

    Saved after every tensor of the checkpoint, as TF does in eager mode.

    Examples:
        >>> import json
        >>> import trackpoint as tp
        >>> class Config(tp.PythonState):
        ...     def __init__(self):
        ...         self.data = {"lr": 0.1}
        ...     def serialize(self):
        ...         return json.dumps(self.data)
        ...     def deserialize(self, string_value):
        ...         self.data = json.loads(string_value)
        >>> Config()._serialize_to_tensors()
        {'py_state': b'{"lr": 0.1}'}
    """

    @abc.abstractmethod
    def serialize(self) -> bytes | str:
        """The state to save."""

    @abc.abstractmethod
    def deserialize(self, string_value: bytes) -> None:
        """Take back what :meth:`serialize` returned (as bytes)."""

    def _serialize_to_tensors(self) -> dict[str, Any]:
        value = self.serialize()
        return {PYTHON_STATE: value.encode("utf-8") if isinstance(value, str) else bytes(value)}

    def _checkpoint_tensor_names(self) -> list[str]:
        return [PYTHON_STATE]

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        self.deserialize(restored_tensors[PYTHON_STATE])
