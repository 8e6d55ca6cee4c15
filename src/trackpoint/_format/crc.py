"""CRC-32C (Castagnoli) and the masking TensorFlow applies to stored checksums."""

from __future__ import annotations

import crc32c as _crc32c

__all__ = ["MASK_DELTA", "crc32c", "mask", "unmask"]

MASK_DELTA = 0xA282EAD8


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return the CRC-32C of ``data``, continuing from the running ``value``.

    ``crc32c(b, crc32c(a)) == crc32c(a + b)``. The hardware-accelerated package
    releases the GIL on large buffers, so shards can be checksummed in parallel.
    """
    return _crc32c.crc32c(data, value)


def mask(crc: int) -> int:
    """Mask a crc the way LevelDB and TensorFlow store it (a crc of a crc is weak)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """Invert :func:`mask`."""
    rot = (masked - MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
