"""The bytes of the messages a multi-process save exchanges: length-prefixed parts, JSON and columns.

No pickle: a message is a list of byte strings (a count, their lengths, then their bytes),
whose parts are JSON documents, UTF-8 strings or raw integer columns. A message that does
not parse raises ``CoordinationError``: it came from a peer, and a peer that sends garbage
is a failed peer.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from trackpoint._format.index_entries import IndexEntries
from trackpoint.errors import CoordinationError

__all__ = ["decode_entries", "encode_entries", "from_json", "pack", "to_json", "unpack"]

_COUNT = struct.Struct("<Q")


def pack(parts: Sequence[bytes]) -> bytes:
    """One message of ``parts``."""
    lengths = np.array([len(p) for p in parts], dtype="<u8")
    return b"".join([_COUNT.pack(len(parts)), lengths.tobytes(), *parts])


def unpack(message: bytes) -> list[bytes]:
    """The parts of a :func:`pack` message."""
    try:
        (count,) = _COUNT.unpack_from(message)
        if 8 + 8 * count > len(message):
            raise ValueError("too many parts")
        lengths = np.frombuffer(message, dtype="<u8", count=count, offset=8)
        at = 8 + 8 * count
        if at + int(lengths.sum()) != len(message):
            raise ValueError("the parts do not add up to the message")
    except (struct.error, ValueError) as exc:
        raise CoordinationError(f"a peer sent a damaged message ({exc})") from exc
    parts = []
    view = memoryview(message)
    for length in lengths.tolist():
        parts.append(bytes(view[at : at + length]))
        at += length
    return parts


def to_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def from_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CoordinationError(f"a peer sent a damaged message ({exc})") from exc


def _strings(values: Sequence[bytes]) -> list[bytes]:
    return [np.array([len(v) for v in values], dtype="<u8").tobytes(), b"".join(values)]


def _unstrings(lengths: bytes, data: bytes) -> list[bytes]:
    out, at = [], 0
    for length in np.frombuffer(lengths, dtype="<u8").tolist():
        out.append(data[at : at + length])
        at += length
    if at != len(data):
        raise CoordinationError("a peer sent a damaged message (string column)")
    return out


def encode_entries(entries: IndexEntries) -> list[bytes]:
    """The parts of one shard's entries (see :class:`IndexEntries`)."""
    names = [name.encode("utf-8", "surrogateescape") for name in entries.names]
    encoded_keys = list(entries.encoded)
    return [
        *_strings(names),
        *_strings(entries.heads),
        *(column.tobytes() for column in (entries.shard_ids, entries.offsets, entries.sizes, entries.crcs)),
        *_strings(encoded_keys),
        *_strings([entries.encoded[key] for key in encoded_keys]),
    ]


ENTRY_PARTS = 12


def decode_entries(parts: Sequence[bytes]) -> IndexEntries:
    """The inverse of :func:`encode_entries`."""
    if len(parts) != ENTRY_PARTS:
        raise CoordinationError("a peer sent a damaged message (entries)")
    entries = IndexEntries()
    entries.names = [raw.decode("utf-8", "surrogateescape") for raw in _unstrings(parts[0], parts[1])]
    entries.heads = _unstrings(parts[2], parts[3])
    for column, raw in zip((entries.shard_ids, entries.offsets, entries.sizes, entries.crcs), parts[4:8]):
        if len(raw) != len(entries.names) * column.itemsize:
            raise CoordinationError("a peer sent a damaged message (entry columns)")
        column.frombytes(raw)
    if len(entries.heads) != len(entries.names):
        raise CoordinationError("a peer sent a damaged message (entry heads)")
    keys, values = _unstrings(parts[8], parts[9]), _unstrings(parts[10], parts[11])
    if len(keys) != len(values):
        raise CoordinationError("a peer sent a damaged message (encoded entries)")
    entries.encoded = dict(zip(keys, values))
    return entries
