"""CRC-32C (Castagnoli) and the masking TensorFlow applies to stored checksums."""

from __future__ import annotations

from collections.abc import Callable

import crc32c as _crc32c
import numpy as np

__all__ = ["MASK_DELTA", "crc32c", "crc32c_combine", "mask", "mask_all", "unmask", "unmask_all"]

MASK_DELTA = 0xA282EAD8


#: ``crc32c(data, value=0)``: the CRC-32C of ``data``, continuing from the running ``value``, so
#: ``crc32c(b, crc32c(a)) == crc32c(a + b)``. The hardware-accelerated package's own function,
#: not a wrapper: saves and restores call it once per tensor. It releases the GIL on large
#: buffers, so shards can be checksummed in parallel.
crc32c: Callable[..., int] = _crc32c.crc32c


def mask(crc: int) -> int:
    """Mask a crc the way LevelDB and TensorFlow store it (a crc of a crc is weak)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """Invert :func:`mask`."""
    rot = (masked - MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def mask_all(crcs: np.ndarray) -> np.ndarray:
    """:func:`mask` over a column of checksums (as ``uint64``)."""
    crcs = crcs.astype(np.uint64)
    rotated = ((crcs >> np.uint64(15)) | (crcs << np.uint64(17))) & np.uint64(0xFFFFFFFF)
    return (rotated + np.uint64(MASK_DELTA)) & np.uint64(0xFFFFFFFF)


def unmask_all(masked: np.ndarray) -> np.ndarray:
    """:func:`unmask` over a column of stored checksums (as ``uint64``)."""
    rot = (masked.astype(np.uint64) - np.uint64(MASK_DELTA)) & np.uint64(0xFFFFFFFF)
    return ((rot >> np.uint64(17)) | (rot << np.uint64(15))) & np.uint64(0xFFFFFFFF)


_POLY = 0x82F63B78  # CRC-32C, reflected


def _gf2_times(matrix: list[int], vector: int) -> int:
    total = 0
    i = 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, row) for row in matrix]


def crc32c_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """The crc of ``a + b`` from ``crc32c(a)``, ``crc32c(b)`` and ``len(b)``.

    Lets several threads checksum parts of one tensor at once. It shifts ``crc_a`` through
    ``length_b`` zero bytes with the usual GF(2) matrix squaring (zlib's crc32_combine).
    """
    if length_b <= 0:
        return crc_a
    odd = [_POLY] + [1 << i for i in range(31)]  # the operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)  # apply a zero byte the first time, then more
        if length_b & 1:
            crc_a = _gf2_times(even, crc_a)
        length_b >>= 1
        if not length_b:
            break
        odd = _gf2_square(even)
        if length_b & 1:
            crc_a = _gf2_times(odd, crc_a)
        length_b >>= 1
        if not length_b:
            break
    return crc_a ^ crc_b
