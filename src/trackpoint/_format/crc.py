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


_POLY = 0x82F63B78  # CRC-32C, reflected: bit 31 is x^0


def _times_mod_p(a: int, b: int) -> int:
    """``a * b`` modulo the CRC polynomial, both 32-bit reflected polynomials."""
    product = 0
    bit = 1 << 31  # x^0
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1  # b times x
    return product


def _powers() -> list[int]:
    """``x^(2^k)`` modulo the polynomial for k = 0..63 (lengths up to 2^60 bytes), each the
    square of the one before."""
    table = [1 << 30]  # x^1
    for _ in range(63):
        table.append(_times_mod_p(table[-1], table[-1]))
    return table


_X_2K = _powers()


def crc32c_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """The crc of ``a + b`` from ``crc32c(a)``, ``crc32c(b)`` and ``len(b)``.

    Lets several threads checksum parts of one tensor at once. Appending ``length_b`` zero
    bytes multiplies ``crc_a`` by ``x^(8 * length_b)``; that power is a product of the
    precomputed ``x^(2^k)``, one per set bit of ``8 * length_b`` (about 30 products of 32
    steps: tens of microseconds, where squaring 32 x 32 bit matrices took milliseconds).

    Example:
        >>> crc32c_combine(crc32c(b"ab"), crc32c(b"cd"), 2) == crc32c(b"abcd")
        True
    """
    if length_b <= 0:
        return crc_a
    shift = 1 << 31  # x^0
    n, k = length_b, 3  # x^(8n): start at x^(2^3)
    while n:
        if n & 1:
            shift = _times_mod_p(_X_2K[k], shift)
        n >>= 1
        k += 1
    return _times_mod_p(shift, crc_a) ^ crc_b
