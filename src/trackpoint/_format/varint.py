"""Base-128 varints as used by SSTable blocks, handles and string tensors."""

from __future__ import annotations

from trackpoint.errors import DataLossError, InvalidArgumentError

__all__ = ["decode", "encode"]


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def encode(value: int) -> bytes:
    """Encode a non-negative integer as a little-endian base-128 varint."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]  # the common case on hot paths: tags, small lengths, ids
    if value < 0:
        raise InvalidArgumentError(f"varint of a negative number: {value}")
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x10000000:  # data offsets below 256 MiB: one per tensor in every index
        if value < 0x200000:
            return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, (value >> 14) & 0x7F | 0x80, value >> 21))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode(buf: bytes | memoryview, pos: int, what: str, max_bytes: int = 10) -> tuple[int, int]:
    """Decode one varint at ``buf[pos]``; return ``(value, next_pos)``.

    Args:
        buf: The bytes to read from.
        pos: Where the varint starts.
        what: Names the thing being read (file and field) for the error message.
        max_bytes: 5 for a varint32, 10 for a varint64.

    Raises:
        DataLossError: The varint runs past the buffer or is longer than ``max_bytes``.
    """
    result = 0
    shift = 0
    end = min(len(buf), pos + max_bytes)
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if max_bytes == 5 and result > 0xFFFFFFFF:
                break
            return result, pos
        shift += 7
    raise DataLossError(f"{what}: truncated or overlong varint at byte {pos}")
