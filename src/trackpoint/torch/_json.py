"""Python state as JSON with its tensors set apart: how non-tensor torch state is stored (never pickled).

:func:`encode` turns a ``state_dict``-like value into JSON text and a list of the tensors
it held, each replaced by ``{"__tensor__": i}`` (and stored beside the JSON as ``tensor_i``,
see :class:`TensorNames`). Tuples and dicts whose keys are not all
strings keep their type (``{"__tuple__": [...]}``, ``{"__items__": [[key, value], ...]}``),
so that :func:`decode` gives back what ``load_state_dict`` was given. Anything else (a
function, an arbitrary object) is refused with its place in the state named.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from trackpoint._io import bounded_json
from trackpoint.errors import InvalidArgumentError

__all__ = ["TensorNames", "decode", "encode", "tensor_name"]

_MARKERS = ("__tensor__", "__tuple__", "__items__", "__float__")
_TENSOR_NAME = re.compile(r"tensor_\d+")


def tensor_name(index: int) -> str:
    """The name under which a node stores the ``index``-th tensor :func:`encode` set apart."""
    return f"tensor_{index}"


class TensorNames(Sequence[str]):
    """A node's tensor names now, which also contains every ``tensor_N``: a restore takes the
    tensors the checkpoint holds, however many the object holds before it is restored.

    Args:
        names: The names listed (the JSON's own name, and the tensors' names now).
        json_name: The name of the node's JSON, which it also contains.
    """

    def __init__(self, names: list[str], json_name: str) -> None:
        self._names = names
        self._json_name = json_name

    def __getitem__(self, index: Any) -> Any:
        return self._names[index]

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name == self._json_name or (isinstance(name, str) and _TENSOR_NAME.fullmatch(name) is not None)


def encode(value: Any, where: str, paths: list[str] | None = None) -> tuple[bytes, list[torch.Tensor]]:
    """JSON bytes for ``value`` and the tensors it held, in order.

    Args:
        value: The state.
        where: What it is called in messages.
        paths: If given, each tensor's place in ``value`` is appended to it (``where`` before
            it: ``opt['state']['fc.weight']['old_dirs'][0]``), to name the tensor in messages.

    Raises:
        InvalidArgumentError: Part of ``value`` is neither JSON, a tuple, nor a tensor (its
            path in ``value`` is named, with ``where`` before it); or ``value`` nests deeper
            than :data:`~trackpoint._format.bounded_json.MAX_JSON_DEPTH`.
    """
    bounded_json.check_depth(value, where)  # before the recursive walk below
    tensors: list[torch.Tensor] = []

    def convert(item: Any, path: str) -> Any:
        if item is None or isinstance(item, (bool, int, str)):
            return item
        if isinstance(item, float):
            return item if math.isfinite(item) else {"__float__": repr(item)}
        if isinstance(item, torch.Tensor):
            tensors.append(item)
            if paths is not None:
                paths.append(f"{where}{path}")
            return {"__tensor__": len(tensors) - 1}
        if isinstance(item, list):
            return [convert(x, f"{path}[{i}]") for i, x in enumerate(item)]
        if isinstance(item, tuple):
            return {"__tuple__": [convert(x, f"{path}[{i}]") for i, x in enumerate(item)]}
        if isinstance(item, dict):
            if all(isinstance(k, str) and k not in _MARKERS for k in item):
                return {k: convert(v, f"{path}[{k!r}]") for k, v in item.items()}
            if all(k is None or isinstance(k, (bool, int, float, str)) for k in item):
                return {"__items__": [[k, convert(v, f"{path}[{k!r}]")] for k, v in item.items()]}
        raise InvalidArgumentError(
            f"{where}{path} is a {type(item).__name__}, which trackpoint cannot store: only tensors, numbers, "
            "strings, None and lists, tuples and dicts of them are saved (trackpoint never pickles)"
        )

    text = bounded_json.dumps(convert(value, ""), where, sort_keys=False, separators=(",", ":"))
    return text.encode("utf-8"), tensors


def decode(data: bytes, tensor: Callable[[int], Any], where: str) -> Any:
    """The value :func:`encode` stored, with ``tensor(i)`` in place of the i-th tensor.

    Raises:
        InvalidArgumentError: The bytes are not what :func:`encode` writes (nor nest within
            :data:`~trackpoint._format.bounded_json.MAX_JSON_DEPTH`, which bounds the walk below).
    """

    def convert(item: Any) -> Any:
        if isinstance(item, list):
            return [convert(x) for x in item]
        if isinstance(item, dict):
            if len(item) == 1:
                ((marker, inner),) = item.items()
                if marker == "__tensor__" and isinstance(inner, int):
                    return tensor(inner)
                if marker == "__tuple__" and isinstance(inner, list):
                    return tuple(convert(x) for x in inner)
                if marker == "__items__" and isinstance(inner, list):
                    return {k: convert(v) for k, v in inner}
                if marker == "__float__" and inner in ("inf", "-inf", "nan"):
                    return float(inner)
            return {k: convert(v) for k, v in item.items()}
        return item

    try:
        return convert(bounded_json.loads(data, where))
    except InvalidArgumentError:
        raise  # nested too deep, or a tensor the checkpoint lacks: the message says so
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"{where}: the stored state is not the JSON trackpoint writes ({exc})") from exc
