"""``tp.split_dependency``: expose parts of one object's state as separate checkpoint values.

Each component checkpoints exactly like a variable (``<path>/<name>/.ATTRIBUTES/VARIABLE_VALUE``),
so a checkpoint of an object holding one combined array restores into separate variables —
in trackpoint or TensorFlow — and the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from trackpoint._saving.device_spec import parse_device
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import VARIABLE_VALUE
from trackpoint._tracking.variables import infer_value
from trackpoint.errors import InvalidArgumentError

__all__ = ["split_dependency"]


class _Group:
    """The buffers the components of one split share."""

    def __init__(
        self,
        names: Sequence[str],
        fill: Callable[[MutableMapping[str, Any]], Any],
        consume: Callable[[Mapping[str, Any]], Any],
    ) -> None:
        self.names = tuple(names)
        self.fill = fill
        self.consume = consume
        self.save_buffer: dict[str, Any] = {}
        self.restore_buffer: dict[str, Any] = {}


class _SplitDependency(Trackable):
    """One component: saves its entry of the shared save buffer, restores into the shared restore buffer."""

    def __init__(self, group: _Group, name: str, dtype: np.dtype) -> None:
        self._group = group
        self._name = name
        self._dtype = dtype

    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    def _checkpoint_tensor_names(self) -> list[str]:
        return [VARIABLE_VALUE]

    def _serialize_to_tensors(self) -> dict[str, Any]:
        group = self._group
        if self._name not in group.save_buffer:
            if group.save_buffer:
                pending = sorted(group.save_buffer)
                group.save_buffer.clear()
                raise InvalidArgumentError(
                    f"Split dependency {self._name!r} is out of step: components {pending} of its group were filled "
                    "but never saved. Split dependencies must be saved together: track every component under the "
                    "saved object."
                )
            group.fill(group.save_buffer)
            missing = [n for n in group.names if n not in group.save_buffer]
            if missing:
                group.save_buffer.clear()
                raise InvalidArgumentError(
                    f"fill_save_buffer_fn did not provide components {missing} (expected {list(group.names)})"
                )
        value = group.save_buffer.pop(self._name)
        return {VARIABLE_VALUE: self._checked(value, "saving")}

    def _checked(self, value: Any, what: str) -> np.ndarray:
        array = np.asarray(value, dtype=object) if isinstance(value, bytes) else np.asarray(value)
        if array.dtype != self._dtype and not (self._dtype == object and array.dtype.kind in "OS"):
            raise InvalidArgumentError(
                f"{what} split dependency {self._name!r}: got {array.dtype}, declared {self._dtype}"
            )
        return array if self._dtype != object else infer_value(array, object)

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        group = self._group
        if self._name in group.restore_buffer:
            raise InvalidArgumentError(
                f"Split dependency {self._name!r} was restored twice before its group {list(group.names)} was "
                "complete. Split dependencies must be restored together."
            )
        group.restore_buffer[self._name] = self._checked(restored_tensors[VARIABLE_VALUE], "restoring")
        if len(group.restore_buffer) == len(group.names):
            values = dict(group.restore_buffer)
            group.restore_buffer.clear()
            group.consume(values)

    def _tp_after_save(self) -> None:
        """Called once a save has serialized every object: all components must have been saved."""
        group = self._group
        if group.save_buffer:
            pending = sorted(group.save_buffer)
            group.save_buffer.clear()
            raise InvalidArgumentError(
                f"split dependency components {pending} were not saved along with the rest of their group "
                f"{list(group.names)}; track every component under the saved object"
            )


def split_dependency(
    component_names: Sequence[str],
    component_dtypes: Sequence[Any],
    fill_save_buffer_fn: Callable[[MutableMapping[str, Any]], Any],
    consume_restore_buffer_fn: Callable[[Mapping[str, Any]], Any],
    device: str | None = None,
) -> dict[str, Trackable]:
    """Create one trackable per component, to track as children of the owning object.

    On save, the first component asked calls ``fill_save_buffer_fn(buffer)``, which must put
    a value for every name into ``buffer``; each component then takes its own. On restore,
    components collect their values and the last one to arrive calls
    ``consume_restore_buffer_fn({name: value})``. Values must have the declared dtypes.

    Args:
        component_names: Local names of the components.
        component_dtypes: One dtype per component.
        fill_save_buffer_fn: Fills the shared save buffer.
        consume_restore_buffer_fn: Receives all restored values at once.
        device: A TF device string (validated; placement is not meaningful on numpy).

    Returns:
        ``{name: trackable}``.

    Examples:
        >>> import numpy as np
        >>> import trackpoint as tp
        >>> class Halves(tp.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.combined = tp.NoDependency(np.arange(4.0))
        ...         def fill(buffer):
        ...             buffer["first"], buffer["second"] = self.combined[:2], self.combined[2:]
        ...         def consume(values):
        ...             self.combined = np.concatenate([values["first"], values["second"]])
        ...         for name, dep in tp.split_dependency(["first", "second"], [np.float64] * 2, fill,
        ...                                              consume).items():
        ...             self._track_trackable(dep, name)
        >>> import tempfile
        >>> path = tp.Checkpoint(h=Halves()).write(tempfile.mkdtemp() + "/c")
        >>> [k for k, _ in tp.list_variables(path)][1:]
        ['h/first/.ATTRIBUTES/VARIABLE_VALUE', 'h/second/.ATTRIBUTES/VARIABLE_VALUE']
    """
    names = list(component_names)
    dtypes = [np.dtype(object) if d in (str, bytes, "string") else np.dtype(d) for d in component_dtypes]
    if len(names) != len(dtypes) or not names:
        raise InvalidArgumentError(
            f"split_dependency needs one dtype per component: {names} vs {list(component_dtypes)}"
        )
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"split_dependency component names repeat: {names}")
    if device is not None:
        parse_device(device)  # only checked: every array lives in this process's memory
    group = _Group(names, fill_save_buffer_fn, consume_restore_buffer_fn)
    return {name: _SplitDependency(group, name, dtype) for name, dtype in zip(names, dtypes, strict=True)}
