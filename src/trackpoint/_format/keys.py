"""Checkpoint keys as the index stores them: UTF-8, with undecodable bytes kept by ``surrogateescape``.

A key read from a file may hold any bytes; decoding with ``surrogateescape`` maps each
undecodable byte to a lone surrogate, and encoding maps it back, so every stored key
survives the round trip to ``str`` and back unchanged.

Examples:
    >>> decode_key(b"w\\xff"), encode_key(decode_key(b"w\\xff"))
    ('w\\udcff', b'w\\xff')
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["decode_key", "encode_key", "lookup_key", "lookup_keys"]


def encode_key(key: str) -> bytes:
    """The stored bytes of ``key``.

    Raises:
        UnicodeEncodeError: ``key`` holds a lone surrogate that no decoded key contains.
    """
    return key.encode("utf-8", "surrogateescape")


def decode_key(raw: bytes) -> str:
    """The ``str`` of a stored key; :func:`encode_key` gives back ``raw``."""
    return raw.decode("utf-8", "surrogateescape")


def lookup_key(key: str | bytes) -> bytes:
    """The bytes to look ``key`` up by: b"" (the header's key, never a tensor's) for a ``str`` no index holds."""
    if isinstance(key, bytes):
        return key
    try:
        return key.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return b""


def lookup_keys(keys: Sequence[str]) -> list[bytes]:
    """:func:`lookup_key` of each key; in one comprehension, as a restore looks up every key it reads."""
    try:
        return [key.encode("utf-8", "surrogateescape") for key in keys]
    except UnicodeEncodeError:
        return [lookup_key(key) for key in keys]
