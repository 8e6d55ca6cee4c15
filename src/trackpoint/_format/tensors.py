"""Tensor bytes as stored in ``.data`` shards: raw little-endian arrays and TF's string layout.

A numeric tensor is its C-order little-endian buffer. A string tensor is
``varint(len_i)... | uint32 Mask(crc of the lengths) | bytes_0 bytes_1 ...`` where the length
crc runs over each length as a little-endian uint32 (uint64 past 4 GiB).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import numpy as np

from trackpoint._format import varint
from trackpoint._format.crc import crc32c, mask, unmask
from trackpoint._format.dtypes import DType
from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = ["as_numeric_buffer", "decode_strings", "encode_strings", "numeric_bytes_view"]


def as_numeric_buffer(array: np.ndarray, dtype: DType) -> np.ndarray:
    """The C-contiguous little-endian array whose bytes are stored; no copy when already so."""
    return np.asarray(array, dtype=dtype.numpy, order="C")  # ascontiguousarray would turn 0-d into 1-d


def numeric_bytes_view(array: np.ndarray) -> memoryview:
    """A flat byte view of a C-contiguous array, without copying (works for ml_dtypes too).

    Builtin dtypes are cast straight from their buffer (the cheapest way, and saves call it
    once per tensor); the others, which the buffer protocol cannot describe, are viewed as
    uint8 first.
    """
    if array.dtype.isbuiltin == 1 and array.size:  # 2 is ml_dtypes; and memoryview cannot cast an empty shape
        return memoryview(array).cast("B")  # type: ignore[arg-type]  # numpy types its buffer from Python 3.12
    return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _element_bytes(value: object, key: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (str, np.str_)):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview, np.bytes_)):
        return bytes(value)
    raise InvalidArgumentError(f"{key}: string tensor element of type {type(value).__name__} is not bytes or str")


def encode_strings(values: np.ndarray, key: str) -> tuple[bytes, int]:
    """Serialize a string tensor; return ``(stored bytes, masked crc32c)``."""
    elements = [_element_bytes(v, key) for v in np.asarray(values, dtype=object).reshape(-1)]
    lengths = [len(e) for e in elements]
    header = b"".join(varint.encode(n) for n in lengths)
    length_crc = _lengths_crc(lengths)
    checksum = struct.pack("<I", mask(length_crc))
    body = b"".join(elements)
    # The entry crc continues from the length crc over the checksum bytes, then the strings.
    crc = crc32c(body, crc32c(checksum, length_crc))
    return header + checksum + body, mask(crc)


def _lengths_crc(lengths: list[int]) -> int:
    """crc32c of the lengths as uint32 (uint64 for strings of 4 GiB or more), as TF computes it."""
    if not lengths or max(lengths) <= 0xFFFFFFFF:
        return crc32c(struct.pack(f"<{len(lengths)}I", *lengths))
    crc = 0
    for n in lengths:
        crc = crc32c(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n), crc)
    return crc


def decode_strings(buf: bytes | memoryview, shape: Sequence[int], crc: int, what: str) -> np.ndarray | bytes:
    """Parse a stored string tensor into bytes objects, verifying both of its checksums.

    Args:
        buf: The stored bytes of the entry.
        shape: The entry's shape.
        crc: The entry's unmasked crc32c.
        what: File and key, for error messages.

    Returns:
        ``bytes`` for a scalar, else an object array of ``bytes`` with ``shape``.

    Raises:
        DataLossError: Lengths run past the entry, a checksum is wrong, or the byte count
            disagrees with the lengths.
    """
    count = math.prod(shape)
    if count > len(buf):  # every element needs at least one length byte
        raise DataLossError(f"{what}: {count} strings cannot fit in {len(buf)} bytes")
    lengths = []
    pos = 0
    for _ in range(count):
        n, pos = varint.decode(buf, pos, what)
        lengths.append(n)
    length_crc = _lengths_crc(lengths)
    if pos + 4 > len(buf):
        raise DataLossError(f"{what}: string tensor truncated before its length checksum")
    (stored,) = struct.unpack_from("<I", buf, pos)
    if unmask(stored) != length_crc:
        raise DataLossError(f"{what}: string length checksum mismatch; the data file is damaged")
    view = memoryview(buf)
    if crc32c(view[pos:], length_crc) != crc:
        raise DataLossError(f"{what}: checksum mismatch; the data file is damaged. Restore from another checkpoint")
    pos += 4
    if pos + sum(lengths) != len(buf):
        raise DataLossError(
            f"{what}: string lengths add up to {sum(lengths)} bytes but the entry holds {len(buf) - pos}"
        )
    out = np.empty(count, dtype=object)
    for i, n in enumerate(lengths):
        out[i] = bytes(view[pos : pos + n])
        pos += n
    if not shape:
        return out[0]
    return out.reshape(tuple(shape))
