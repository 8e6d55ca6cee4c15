"""Index entries: the record a ``BundleEntryProto`` decodes to, from protobuf or from numpy columns.

Two decoders, each for what it does best. Many entries at once (a restore, a listing) are
decoded together as numpy columns by :mod:`.entry_columns`; one entry, and any entry the
columns flag as unusual (slices, named dimensions, unknown fields, damage), by protobuf,
whose error says what is wrong. Neither checks what the entry claims: that is
:mod:`.entry_rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from trackpoint._format import slices
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.dtypes import DType, from_enum
from trackpoint._format.entry_columns import EntryColumns
from trackpoint._format.slices import readable_key
from trackpoint.errors import DataLossError

__all__ = ["Entry", "entries_from_columns", "parse_entry", "slice_keys"]


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded index entry; its data is not read yet.

    Attributes:
        key: The checkpoint key (see :mod:`.keys` for how it maps to the stored bytes).
        dtype_enum: The stored ``DataType`` value.
        shape: The tensor's shape (of the whole tensor, for a sliced one).
        shard_id, offset, size: Where its bytes lie: data shard, byte offset and count.
        crc32c: The stored (masked) checksum of its bytes.
        slices: For a tensor saved in slices, one ``TensorSliceProto`` per slice; else empty.
        dtype: The readable dtype, or None when trackpoint cannot convert ``dtype_enum``.
    """

    key: str
    dtype_enum: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int
    slices: tuple[pb.TensorSliceProto, ...]
    dtype: DType | None

    @property
    def is_sliced(self) -> bool:
        """Whether the tensor is stored in slices, each under a key of its own."""
        return bool(self.slices)


def parse_entry(key: str, value: bytes, index_path: str) -> Entry:
    """Decode one serialized entry with protobuf.

    Raises:
        DataLossError: ``value`` is no ``BundleEntryProto``, or its shape has unknown rank.
    """
    proto = pb.BundleEntryProto()
    try:
        proto.ParseFromString(value)
    except DecodeError as exc:
        raise DataLossError(
            f"{index_path}: malformed entry for key {readable_key(key)!r}: {exc}", path=index_path, key=key
        ) from exc
    shape = proto.shape
    if shape.unknown_rank:
        raise DataLossError(f"{index_path}: key {readable_key(key)!r} has an invalid shape", path=index_path, key=key)
    dtype = proto.dtype
    return Entry(
        key,
        dtype,
        tuple([dim.size for dim in shape.dim]),
        proto.shard_id,
        proto.offset,
        proto.size,
        proto.crc32c,
        tuple(proto.slices) if proto.slices else (),
        from_enum(dtype),
    )


def entries_from_columns(keys: Sequence[str], columns: EntryColumns) -> list[Entry | None]:
    """The entries of decoded columns, one per key; None where the columns could not decode the row."""
    shapes = columns.shapes()
    rows = zip(
        keys,
        columns.plain.tolist(),
        columns.dtype.tolist(),
        shapes,
        columns.shard_id.tolist(),
        columns.offset.tolist(),
        columns.size.tolist(),
        columns.crc32c.tolist(),
    )
    return [
        Entry(key, dtype, shape, shard_id, offset, size, crc, (), from_enum(dtype)) if plain else None
        for key, plain, dtype, shape, shard_id, offset, size, crc in rows
    ]


def slice_keys(entries: list[Entry]) -> set[bytes]:
    """Index keys of the slices that full entries refer to (read through those, not alone)."""
    hidden: set[bytes] = set()
    for entry in entries:
        for proto in entry.slices:
            hidden.add(slices.encode_slice_key(entry.key, slices.extents_from_proto(proto)))
    return hidden
