"""Dtype casts for ``rewrite``: which tensors a cast rule changes, and refusing casts that lose data.

The rule: a cast names a target dtype of one family, floating point (float16/32/64,
bfloat16, float8_*) or integer (int8-64, uint8-64), and changes the tensors of that family
only. A float cast rounds to the nearest value of the target (that is what a precision
change means) but refuses a finite value that would become infinite; an integer cast
refuses any value outside the target's range. Ints never become floats nor floats ints, and
bool, complex and string tensors are never cast: each would change values silently.

Examples:
    >>> import numpy as np
    >>> target = target_dtype("float16", "w")
    >>> cast_value(np.array([1.0, 2.5], np.float32), target, "w", "ckpt")
    array([1. , 2.5], dtype=float16)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trackpoint._io import DTYPES, FLOAT_NAMES, INT_NAMES, DType, family, from_numpy
from trackpoint.errors import InvalidArgumentError

__all__ = ["applies", "cast_into", "cast_value", "target_dtype"]

_BY_NAME = {d.name: d for d in DTYPES.values()}
_BY_NAME["half"] = _BY_NAME["float16"]
_BY_NAME["float"] = _BY_NAME["float32"]
_BY_NAME["double"] = _BY_NAME["float64"]


def target_dtype(spec: Any, rule: str) -> DType:
    """The dtype a cast rule names (a TF/numpy name such as ``"bfloat16"``, or a numpy dtype).

    Raises:
        InvalidArgumentError: Not a dtype, or one no cast may produce.
    """
    dtype: DType | None
    if isinstance(spec, str):
        dtype = _BY_NAME.get(spec.strip().lower().removeprefix("tf.").removeprefix("np."))
    else:
        try:
            dtype = from_numpy(np.dtype(spec))
        except TypeError:
            dtype = None
    if dtype is None or family(dtype) == "other":
        raise InvalidArgumentError(
            f"cast {rule!r}: {spec!r} is not a dtype a cast may produce; name a floating-point dtype "
            f"({', '.join(sorted(FLOAT_NAMES))}) or an integer dtype ({', '.join(sorted(INT_NAMES))})"
        )
    return dtype


def applies(source: DType, target: DType) -> bool:
    """Whether a cast to ``target`` changes a tensor of ``source``: same family, other dtype."""
    return family(source) == family(target) and source.enum != target.enum


_CHUNK = 1 << 20  # elements cast and checked at a time: a few MiB of temporaries, whatever the tensor's size


def cast_value(value: Any, target: DType, key: str, prefix: str) -> np.ndarray:
    """``value`` cast to ``target``, or an error naming the first value the cast would lose.

    The cast goes chunk by chunk into one preallocated result (see :func:`cast_into`): memory
    holds the source and the result, plus a chunk's masks. A large stored tensor is not cast
    here but streamed through :func:`cast_into` a chunk at a time (see :mod:`._chunk_copy`).

    Raises:
        InvalidArgumentError: A finite float would overflow to infinity, or an integer does not fit.
    """
    array = np.asarray(value)
    out = np.empty(array.shape, target.numpy)
    source, result = array.reshape(-1), out.reshape(-1)
    for start in range(0, source.size, _CHUNK):
        cast_into(source[start : start + _CHUNK], result[start : start + _CHUNK], key, prefix, start, array.shape)
    return out


def cast_into(chunk: np.ndarray, out: np.ndarray, key: str, prefix: str, start: int, shape: tuple[int, ...]) -> None:
    """Cast the flat ``chunk`` (elements ``start:`` of a tensor of ``shape``) into ``out``, of the
    target dtype and the same length, refusing a value the cast would lose.

    Allocates no more than a mask of the chunk (and a float64 copy of the few values an overflow
    found), so a tensor cast chunk by chunk costs bounded memory whatever its size.

    Raises:
        InvalidArgumentError: A finite float would overflow to infinity (or to NaN, for a target
            without infinities), or an integer does not fit; the message names the first such
            value and its index in the tensor.
    """
    name = out.dtype.name  # the checkpoint's names for the dtypes a cast may produce
    floats = name in FLOAT_NAMES
    if not floats:
        info = np.iinfo(out.dtype)
        if chunk.size and (int(chunk.min()) < info.min or int(chunk.max()) > info.max):
            first = int(np.flatnonzero((chunk < info.min) | (chunk > info.max))[0])
            raise InvalidArgumentError(
                f"{prefix}: casting {key!r} to {name} would change values outside [{info.min}, {info.max}] "
                f"(first: {chunk[first]!r} at {_index(start + first, shape)}); cast to a wider integer dtype",
                path=prefix,
                key=key,
            )
    with np.errstate(over="ignore", invalid="ignore"):
        out[...] = chunk
    if not floats:
        return
    # The cast's non-finite values first (usually none): only those are looked up in the source.
    changed = np.flatnonzero(~_isfinite(out))
    if not changed.size:
        return
    lost = changed[_isfinite(chunk[changed])]
    if lost.size:
        first = int(lost[0])
        raise InvalidArgumentError(
            f"{prefix}: casting {key!r} to {name} would turn finite value(s) into infinity "
            f"(first: {chunk[first]!r} at {_index(start + first, shape)}); cast to a wider dtype (float32, "
            "bfloat16) or leave this tensor out of the cast",
            path=prefix,
            key=key,
        )


def _isfinite(values: np.ndarray) -> np.ndarray:
    try:
        return np.isfinite(values)
    except TypeError:  # a float type without an isfinite loop of its own: float64 holds its values exactly
        return np.isfinite(values.astype(np.float64))


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []
