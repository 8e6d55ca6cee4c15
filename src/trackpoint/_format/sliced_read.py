"""Tensors stored in slices, and regions of tensors: read from the stored slices that make them up.

A tensor saved in slices (a partitioned variable, or one saved by several processes) has one
index entry naming its slices and one entry per slice holding the bytes. Nothing about them is
trusted: before anything is allocated, each slice must lie inside the tensor, the slices must be
disjoint and cover it exactly, and each slice's entry must exist, be of the tensor's dtype and
the slice's shape, and lie inside its data file. A checksum covers one stored slice, so a
region is read as the stored slices that overlap it, each whole.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"m": np.arange(6).reshape(2, 3)})
    >>> with BundleReader(prefix) as reader:
    ...     read_region(reader, "m", [(1, 2), (0, 2)])
    array([[3, 4]])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from trackpoint._format import slices
from trackpoint._format.dtypes import DType, enum_name
from trackpoint._format.entries import Entry
from trackpoint._format.slices import readable_key
from trackpoint.errors import DataLossError, InvalidArgumentError

if TYPE_CHECKING:
    from trackpoint._format.bundle_reader import BundleReader

__all__ = ["Bounds", "check_disjoint", "read_region", "read_sliced", "region_entry", "slice_parts"]

#: ``(start, stop)`` per dimension of a box inside a tensor.
Bounds = tuple[tuple[int, int], ...]


def read_sliced(reader: BundleReader, entry: Entry, dtype: DType, out: np.ndarray | None) -> np.ndarray:
    """The value of a sliced ``entry`` (checked, of ``dtype``), assembled into ``out`` if given."""
    result = out if out is not None else np.empty(entry.shape, dtype=dtype.numpy)
    for part, bounds in slice_parts(reader, entry, dtype):
        result[tuple(slice(start, stop) for start, stop in bounds)] = reader.read_checked(part, dtype)
    return result


def slice_parts(reader: BundleReader, entry: Entry, dtype: DType) -> list[tuple[Entry, Bounds]]:
    """The entry of each stored slice of a sliced ``entry``, with its bounds, all checked.

    The slices are disjoint and their volumes add up to the whole, so they cover it
    exactly; every part is validated against its file before anything is allocated.
    """
    index_path = reader.index_path
    total = math.prod(entry.shape)
    boxes = []
    covered = 0
    for proto in entry.slices:
        extents = slices.extents_from_proto(proto)
        try:
            bounds = slices.resolve(extents, entry.shape, f"{index_path}: key {readable_key(entry.key)!r}")
        except InvalidArgumentError as exc:
            raise DataLossError(str(exc), path=index_path, key=entry.key) from exc
        boxes.append((extents, bounds))
        covered += slices.volume(bounds)
    if covered != total:
        raise DataLossError(
            f"{index_path}: slices of key {readable_key(entry.key)!r} cover {covered} of its {total} elements "
            "(overlapping or incomplete); the checkpoint is damaged or a shard's index was lost",
            path=index_path,
            key=entry.key,
        )
    check_disjoint([b for _, b in boxes], entry.key, index_path)
    return [(_part(reader, entry, dtype, extents, bounds), bounds) for extents, bounds in boxes]


def _part(reader: BundleReader, entry: Entry, dtype: DType, extents: slices.Extents, bounds: Bounds) -> Entry:
    """The checked entry of the stored slice ``bounds`` (``extents``) of ``entry``."""
    index_path = reader.index_path
    part_key = slices.encode_slice_key(entry.key, extents)
    if part_key not in reader:
        raise DataLossError(
            f"{index_path}: slice {list(bounds)} of key {readable_key(entry.key)!r} has no entry",
            path=index_path,
            key=entry.key,
        )
    part = reader.entry(part_key)
    expected = tuple(stop - start for start, stop in bounds)
    if part.dtype_enum != entry.dtype_enum or part.shape != expected or part.is_sliced:
        raise DataLossError(
            f"{index_path}: slice {list(bounds)} of key {readable_key(entry.key)!r} is stored as "
            f"{enum_name(part.dtype_enum)}{list(part.shape)}, expected {dtype.enum_name}{list(expected)}",
            path=index_path,
            key=entry.key,
        )
    reader.checked(part)
    return part


def check_disjoint(boxes: list[Bounds], key: str, path: str) -> None:
    """Raise if any two slices overlap (sweep along the first dimension)."""
    if not boxes or not boxes[0]:
        if len(boxes) > 1:
            raise DataLossError(f"{path}: scalar key {readable_key(key)!r} has {len(boxes)} slices", path=path, key=key)
        return
    ordered = sorted(boxes)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if b[0][0] >= a[0][1]:
                break
            if all(bs < ae and as_ < be for (as_, ae), (bs, be) in zip(a, b)):
                raise DataLossError(
                    f"{path}: slices {list(a)} and {list(b)} of key {readable_key(key)!r} overlap", path=path, key=key
                )


def read_region(
    reader: BundleReader, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None = None
) -> np.ndarray:
    """Read the part ``bounds`` of one tensor, checksums verified (see :meth:`BundleReader.read_region`)."""
    entry, dtype, bounds = _region(reader, key, bounds, full_shape)
    if not entry.is_sliced:
        whole = reader.read_checked(entry, dtype)
        # The trailing Ellipsis keeps a 0-d tensor a 0-d array (an empty index would give a
        # scalar, and np.ascontiguousarray makes anything at least 1-d).
        region = np.asarray(whole)[tuple(slice(a, b) for a, b in bounds) + (Ellipsis,)]
        return region if region.flags.c_contiguous else np.copy(region, order="C")
    parts = slice_parts(reader, entry, dtype)
    exact = _slice_of(parts, bounds)
    if exact is not None:  # one stored slice is the region: no assembly
        return np.asarray(reader.read_checked(exact, dtype))
    result = np.empty(tuple(stop - start for start, stop in bounds), dtype=dtype.numpy)
    for part, part_bounds in parts:
        overlap = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(bounds, part_bounds)]
        if any(start >= stop for start, stop in overlap):
            continue
        data = reader.read_checked(part, dtype)
        result[tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(overlap, bounds))] = np.asarray(data)[
            tuple(slice(lo - c, hi - c) for (lo, hi), (c, _) in zip(overlap, part_bounds))
        ]
    return result


def region_entry(
    reader: BundleReader, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None = None
) -> Entry | None:
    """The checked plain entry whose bytes are exactly the region (see :meth:`BundleReader.region_entry`)."""
    entry, dtype, bounds = _region(reader, key, bounds, full_shape)
    if not entry.is_sliced:
        return entry if all(stop - start == dim for (start, stop), dim in zip(bounds, entry.shape)) else None
    return _slice_of(slice_parts(reader, entry, dtype), bounds)


def _region(
    reader: BundleReader, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None
) -> tuple[Entry, DType, Bounds]:
    """The checked entry of ``key``, its dtype and ``bounds`` as ints, once the region lies in it."""
    entry = reader.entry(key)
    dtype = reader.checked(entry)
    bounds = tuple((int(start), int(stop)) for start, stop in bounds)
    if full_shape is not None and tuple(full_shape) != tuple(entry.shape):
        raise InvalidArgumentError(
            f"{reader.prefix}: key {readable_key(entry.key)!r} is {dtype.name}{list(entry.shape)}, not of the full "
            f"shape {list(full_shape)} a block of it is to be read for",
            path=reader.prefix,
            key=readable_key(entry.key),
        )
    if len(bounds) != len(entry.shape) or any(
        not 0 <= start <= stop <= dim for (start, stop), dim in zip(bounds, entry.shape)
    ):
        raise InvalidArgumentError(
            f"{reader.prefix}: key {readable_key(entry.key)!r} is {dtype.name}{list(entry.shape)}; the region "
            f"{[list(b) for b in bounds]} does not lie inside it",
            path=reader.prefix,
            key=readable_key(entry.key),
        )
    return entry, dtype, bounds


def _slice_of(parts: Sequence[tuple[Entry, Bounds]], bounds: Bounds) -> Entry | None:
    """The stored slice among ``parts`` whose bounds are exactly ``bounds``, if one is."""
    return next((part for part, part_bounds in parts if part_bounds == bounds), None)
