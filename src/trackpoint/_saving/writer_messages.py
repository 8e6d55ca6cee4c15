"""The messages between a process and its writer process (:mod:`.writer_process`), without pickle.

A message is one :func:`.wire.pack` of parts, preceded on the pipe by its length. A write is a
JSON header (the prefix; the keys, unless the child holds them already; the staged memory's
size; each dtype by name; the values sent inline), then four integer columns (each tensor's
offset in the staged memory, dtype code, rank and the dimensions of all), then the bytes of the
inline values. An answer is JSON: null, or the error the write raised (its class in
``trackpoint.errors``, arguments, path and key).

Inline values are what the staged memory does not hold: ``bytes`` (the object graph), empty
arrays, and string tensors (object arrays of ``bytes`` or ``str``; :func:`sendable_dtypes` refuses any
other object array, which the thread then writes).

Examples:
    >>> import io
    >>> stream = io.BytesIO()
    >>> send(stream, [to_json({"prefix": "run/ckpt-1"}), b"\\x00\\x01"])
    >>> _ = stream.seek(0)
    >>> parts = receive(stream)
    >>> from_json(parts[0]), parts[1]
    ({'prefix': 'run/ckpt-1'}, b'\\x00\\x01')
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from trackpoint._saving.wire import from_json, pack, to_json, unpack
from trackpoint._storage import child_processes
from trackpoint.errors import CheckpointError, WriteError

__all__ = [
    "decode_error",
    "decode_inline",
    "dtype_name",
    "encode_error",
    "encode_inline",
    "from_json",
    "receive",
    "send",
    "sendable_dtypes",
    "to_json",
]

_LENGTH = struct.Struct("<Q")


def send(stream: IO[bytes], parts: Sequence[bytes]) -> None:
    """Write one message of ``parts`` to ``stream`` and flush it."""
    message = pack(parts)
    stream.write(_LENGTH.pack(len(message)))
    stream.write(message)
    stream.flush()


def receive(stream: IO[bytes]) -> list[bytes]:
    """The parts of the next message on ``stream``.

    Raises:
        EOFError: The stream ended (the other process is gone).
        CoordinationError: The message does not parse.
    """
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (size,) = _LENGTH.unpack(head)
    message = stream.read(size)
    if len(message) < size:
        raise EOFError
    return unpack(message)


def dtype_name(dtype: np.dtype) -> str:
    """A name :func:`numpy.dtype` takes back: the type string, byte order included, or the name
    of an ``ml_dtypes`` type, whose type string (``<V2``) does not tell it."""
    return dtype.name if dtype.kind == "V" else dtype.str


def _strings(value: np.ndarray) -> bool:
    return all(type(item) is bytes or type(item) is str for item in value.reshape(-1).tolist())


def sendable_dtypes(values: Sequence[Any]) -> list[np.dtype | None] | None:
    """The dtypes of ``values`` (None for ``bytes``) when every value can be sent: NumPy arrays
    (object arrays only of ``bytes`` or ``str``) and ``bytes``; None when one cannot."""
    if not set(map(type, values)) <= {np.ndarray, bytes}:
        return None
    dtypes = list(map(getattr, values, itertools.repeat("dtype"), itertools.repeat(None)))
    objects = {dtype for dtype in set(dtypes) if dtype is not None and dtype.hasobject}
    if objects and not all(_strings(v) for v, dtype in zip(values, dtypes) if dtype in objects):
        return None
    return dtypes


def encode_inline(row: int, value: Any) -> tuple[list[Any], list[bytes]]:
    """The header record and the parts of one inline value (see the module docstring)."""
    if type(value) is bytes:
        return [row, "bytes", "", [], []], [value]
    if not value.dtype.hasobject:  # empty
        return [row, "empty", dtype_name(value.dtype), list(value.shape), []], []
    items = value.reshape(-1).tolist()
    texts = [i for i, item in enumerate(items) if type(item) is str]
    parts = [item.encode("utf-8", "surrogatepass") if type(item) is str else item for item in items]
    return [row, "strings", "", list(value.shape), texts], parts


def decode_inline(record: list[Any], parts: list[bytes]) -> tuple[Any, int]:
    """The value of an :func:`encode_inline` record whose parts start ``parts``; the parts it took."""
    _, kind, dtype, shape, texts = record
    if kind == "bytes":
        return parts[0], 1
    if kind == "empty":
        return np.zeros(shape, np.dtype(dtype)), 0
    count = int(np.prod(shape, dtype=np.int64))
    items: list[Any] = list(parts[:count])
    for i in texts:
        items[i] = items[i].decode("utf-8", "surrogatepass")
    value = np.empty(count, object)
    value[:] = items
    return value.reshape(shape), count


def encode_error(error: BaseException | None, prefix: str) -> bytes:
    """The answer to a write: null, or ``error`` as a ``trackpoint.errors`` class can be made again."""
    return child_processes.encode_error(error, WriteError, f"could not write checkpoint {prefix}", prefix)


def decode_error(raw: bytes) -> CheckpointError | None:
    """The error an :func:`encode_error` answer carries (a ``WriteError`` if its class is unknown)."""
    return child_processes.decode_error(raw)
