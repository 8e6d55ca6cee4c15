"""Partitioned tensors: slice specs, their protos, and the ordered-code keys of slice entries.

A slice is a tuple of per-dimension ``(start, length)`` extents; ``length == -1`` means the
whole dimension (TF's ``-`` in a spec string and an ``Extent`` without ``length``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.keys import decode_key, encode_key
from trackpoint.errors import InvalidArgumentError

__all__ = [
    "Extents",
    "SliceSet",
    "SlicedValue",
    "cover_problem",
    "decode_slice_key",
    "encode_slice_key",
    "extents_from_proto",
    "extents_to_proto",
    "format_spec",
    "held_slices",
    "is_full",
    "parse_spec",
    "readable_key",
    "resolve",
]

Extents = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SlicedValue:
    """A value to save as one slice of a larger tensor (the part one process holds).

    A save stores it under the slice key of its tensor; the index's full entry lists the
    slices of every process. It is what ``tp.distributed.ShardedVariable`` saves.

    Attributes:
        value: The slice's data, shaped as the slice.
        full_shape: The whole tensor's shape.
        extents: Where the slice lies in it: ``(start, length)`` per dimension.
    """

    value: Any
    full_shape: tuple[int, ...]
    extents: Extents

    @property
    def spec(self) -> str:
        """The slice as TF's spec string (``"10 4 0,5:0,4"``)."""
        return format_spec(self.full_shape, self.extents)


@dataclass(frozen=True)
class SliceSet:
    """Any number of slices of one tensor, all held by one process (a JAX array's shards on its devices).

    A save stores each part as a :class:`SlicedValue`; a save of several processes tiles the
    tensor with every process's parts. A process may hold none.

    Attributes:
        parts: The slices, none overlapping.
        full_shape: The whole tensor's shape.
        dtype: The tensor's numpy dtype (what a process holding no part still describes).
    """

    parts: tuple[SlicedValue, ...]
    full_shape: tuple[int, ...]
    dtype: Any


def held_slices(value: Any) -> tuple[SlicedValue, ...] | None:
    """The slices ``value`` holds: its parts for a :class:`SliceSet`, itself for a
    :class:`SlicedValue`, None for a whole tensor.

    Examples:
        >>> held_slices(SlicedValue(0, (4,), ((0, 2),)))[0].spec
        '4 0,2'
        >>> held_slices(3.0) is None
        True
    """
    if isinstance(value, SlicedValue):
        return (value,)
    if isinstance(value, SliceSet):
        return value.parts
    return None


def _num_increasing(value: int) -> bytes:
    """OrderedCode WriteNumIncreasing: a length byte, then big-endian without leading zeros."""
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes((len(raw),)) + raw


_HEADER_BITS = [
    (0, 0),
    (0x80, 0),
    (0xC0, 0),
    (0xE0, 0),
    (0xF0, 0),
    (0xF8, 0),
    (0xFC, 0),
    (0xFE, 0),
    (0xFF, 0),
    (0xFF, 0x80),
    (0xFF, 0xC0),
]


def _signed_num_increasing(value: int) -> bytes:
    """OrderedCode WriteSignedNumIncreasing: order-preserving variable-length signed ints."""
    x = ~value if value < 0 else value
    if x < 64:
        return bytes(((0x80 ^ value) & 0xFF,))
    length = x.bit_length() // 7 + 1
    buf = bytearray(value.to_bytes(10, "big", signed=True)[10 - length :])
    buf[0] ^= _HEADER_BITS[length][0]
    buf[1] ^= _HEADER_BITS[length][1]
    return bytes(buf)


_ESCAPE = re.compile(b"[\\x00\\xff]")
_ESCAPES = {b"\x00": b"\x00\xff", b"\xff": b"\xff\x00"}


def encode_slice_key(full_key: str, extents: Extents) -> bytes:
    """The index key under which one slice of ``full_key`` is stored (sorts after the header)."""
    name = _ESCAPE.sub(lambda m: _ESCAPES[m.group()], encode_key(full_key))
    parts = [b"\x00", name, b"\x00\x01", _num_increasing(len(extents))]
    for start, length in extents:
        parts.append(_signed_num_increasing(start))
        parts.append(_signed_num_increasing(length))
    return b"".join(parts)


def _read_name(raw: bytes, pos: int) -> tuple[bytes, int]:
    """OrderedCode ReadString: bytes up to the ``\\x00\\x01`` terminator, escapes undone."""
    out = bytearray()
    while True:
        byte = raw[pos]
        if byte == 0x00:
            following = raw[pos + 1]
            if following == 0x01:
                return bytes(out), pos + 2
            if following != 0xFF:
                raise ValueError("bad escape")
        elif byte == 0xFF:
            if raw[pos + 1] != 0x00:
                raise ValueError("bad escape")
        else:
            out.append(byte)
            pos += 1
            continue
        out.append(byte)
        pos += 2


def _read_num_increasing(raw: bytes, pos: int) -> tuple[int, int]:
    """OrderedCode ReadNumIncreasing, the inverse of :func:`_num_increasing`."""
    length = raw[pos]
    end = pos + 1 + length
    if length > 8 or end > len(raw):
        raise ValueError("bad length")
    return int.from_bytes(raw[pos + 1 : end], "big"), end


def _read_signed_num_increasing(raw: bytes, pos: int) -> tuple[int, int]:
    """OrderedCode ReadSignedNumIncreasing, the inverse of :func:`_signed_num_increasing`.

    The encoding's length is its count of leading header bits (ones for a non-negative
    value, zeros for a negative one) over the first two bytes.
    """
    flip = 0x00 if raw[pos] & 0x80 else 0xFF
    second = raw[pos + 1] ^ flip if pos + 1 < len(raw) else 0
    bits = ((raw[pos] ^ flip) << 8) | second
    length = 16 - (bits ^ 0xFFFF).bit_length()  # leading ones
    end = pos + length
    if not 1 <= length <= 10 or end > len(raw):
        raise ValueError("bad signed number")
    unsigned = int.from_bytes(raw[pos:end], "big") ^ (((1 << length) - 1) << (7 * length))
    value = unsigned - (1 << (8 * length)) if flip else unsigned
    if _signed_num_increasing(value) != raw[pos:end]:  # a non-canonical encoding is no slice key
        raise ValueError("non-canonical signed number")
    return value, end


def decode_slice_key(key: str | bytes) -> tuple[str, Extents] | None:
    """The full key and extents an index key encodes (see :func:`encode_slice_key`); None if it is none.

    Examples:
        >>> decode_slice_key(encode_slice_key("w", ((0, 2), (0, -1))))
        ('w', ((0, 2), (0, -1)))
        >>> decode_slice_key("w") is None
        True
    """
    try:
        raw = encode_key(key) if isinstance(key, str) else bytes(key)
        if raw[:1] != b"\x00":
            return None
        name, pos = _read_name(raw, 1)
        rank, pos = _read_num_increasing(raw, pos)
        if 2 * rank > len(raw) - pos:  # each extent takes two bytes at least
            return None
        extents = []
        for _ in range(rank):
            start, pos = _read_signed_num_increasing(raw, pos)
            length, pos = _read_signed_num_increasing(raw, pos)
            extents.append((start, length))
    except (IndexError, ValueError):  # UnicodeEncodeError is a ValueError
        return None
    if pos != len(raw):
        return None
    return decode_key(name), tuple(extents)


def readable_key(key: str | bytes) -> str:
    """A key as messages and listings show it: a slice key as ``name[start:stop,...]``, ``:`` for a
    whole dimension; any other key as itself.

    Slice keys are binary (:func:`encode_slice_key`), unreadable when printed raw.

    Examples:
        >>> readable_key(encode_slice_key("dense/kernel", ((4, 3), (0, -1))))
        'dense/kernel[4:7,:]'
        >>> readable_key("dense/kernel")
        'dense/kernel'
    """
    text = key if isinstance(key, str) else decode_key(key)
    if not text.startswith("\x00"):
        return text
    decoded = decode_slice_key(key)
    if decoded is None:
        return text
    name, extents = decoded
    dims = ",".join(f"{start or ''}:" if length == -1 else f"{start}:{start + length}" for start, length in extents)
    return f"{name}[{dims}]"


def extents_to_proto(extents: Extents) -> pb.TensorSliceProto:
    proto = pb.TensorSliceProto()
    for start, length in extents:
        extent = proto.extent.add()
        if length != -1:
            extent.start = start
            extent.length = length
    return proto


def extents_from_proto(proto: pb.TensorSliceProto) -> Extents:
    return tuple((e.start, e.length) if e.HasField("length") else (e.start, -1) for e in proto.extent)


def resolve(extents: Extents, full_shape: Sequence[int], what: str) -> tuple[tuple[int, int], ...]:
    """Turn extents into ``(start, stop)`` per dimension, checked against ``full_shape``.

    Raises:
        InvalidArgumentError: Wrong rank, a negative start or length, or a slice past the end.
    """
    if len(extents) != len(full_shape):
        raise InvalidArgumentError(f"{what}: slice of rank {len(extents)} for a tensor of rank {len(full_shape)}")
    bounds = []
    for (start, length), dim in zip(extents, full_shape):
        if length == -1:
            if start != 0:
                raise InvalidArgumentError(f"{what}: full-extent slice dimension with start {start}")
            bounds.append((0, dim))
            continue
        if start < 0 or length < 0 or start + length > dim:
            raise InvalidArgumentError(f"{what}: slice [{start}, {start + length}) outside dimension of size {dim}")
        bounds.append((start, start + length))
    return tuple(bounds)


def is_full(extents: Extents, full_shape: Sequence[int]) -> bool:
    """Whether the extents cover the whole tensor (TF then stores it as a plain entry)."""
    return all(length == -1 or (start == 0 and length == dim) for (start, length), dim in zip(extents, full_shape))


def parse_spec(spec: str) -> tuple[tuple[int, ...], Extents]:
    """Parse TF's ``"<d0> <d1> ... <slice>"`` string, e.g. ``"10 4 0,4:-"``.

    Returns:
        ``(full_shape, extents)``.

    Raises:
        InvalidArgumentError: The string is malformed or the slice does not fit the shape.
    """
    fields = spec.split(" ")
    if len(fields) < 2:
        raise InvalidArgumentError(f"malformed shape-and-slice spec {spec!r}: expected '<dims> <slice>'")
    try:
        shape = tuple(int(f) for f in fields[:-1])
        extents: list[tuple[int, int]] = []
        if fields[-1]:
            for part in fields[-1].split(":"):
                if part == "-":
                    extents.append((0, -1))
                else:
                    start, length = part.split(",")
                    extents.append((int(start), int(length)))
    except ValueError as exc:
        raise InvalidArgumentError(f"malformed shape-and-slice spec {spec!r}: {exc}") from exc
    if any(d < 0 for d in shape):
        raise InvalidArgumentError(f"malformed shape-and-slice spec {spec!r}")
    resolve(tuple(extents), shape, f"shape-and-slice spec {spec!r}")
    return shape, tuple(extents)


def format_spec(full_shape: Sequence[int], extents: Extents) -> str:
    """The inverse of :func:`parse_spec` (``SaveSliceInfo.spec``)."""
    dims = " ".join(str(d) for d in full_shape)
    parts = ":".join("-" if length == -1 else f"{start},{length}" for start, length in extents)
    return f"{dims} {parts}"


def volume(bounds: Sequence[tuple[int, int]]) -> int:
    return math.prod(stop - start for start, stop in bounds)


def cover_problem(full_shape: Sequence[int], parts: Sequence[Extents], *, complete: bool = True) -> str | None:
    """Why the slices ``parts`` do not tile a tensor of ``full_shape`` exactly, or None if they do.

    With ``complete=False`` only overlaps are problems: one part of a checkpoint that TF's merge
    joins later (one worker's save of a partitioned variable) holds some of the slices.

    Examples:
        >>> cover_problem((4, 3), [((0, 2), (0, 3)), ((2, 2), (0, 3))]) is None
        True
        >>> cover_problem((4, 3), [((0, 2), (0, 3))])
        'its slices cover 6 of its 12 elements'
        >>> cover_problem((4, 3), [((0, 2), (0, 3))], complete=False) is None
        True
    """
    boxes = sorted(resolve(extents, full_shape, "slice") for extents in parts)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if a and b[0][0] >= a[0][1]:
                break
            if all(bs < ae and as_ < be for (as_, ae), (bs, be) in zip(a, b)):
                return f"its slices {[list(x) for x in a]} and {[list(x) for x in b]} overlap"
    covered, total = sum(volume(box) for box in boxes), math.prod(full_shape)
    if complete and covered != total:
        return f"its slices cover {covered} of its {total} elements"
    return None
