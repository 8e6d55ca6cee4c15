"""Reading a bundle lazily: the index is parsed on open, each tensor read on demand.

Nothing in the files is trusted. Before any allocation, every entry is checked against
what its shard file can hold (dtype known, dims non-negative, ``size`` equal to the
element count times the element size, ``offset + size`` inside the file, shard id below
the shard count, slices inside the tensor, disjoint and complete), and every tensor's
crc32c is verified against the bytes read.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator

import numpy as np

from trackpoint._format import naming, slices, sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.crc import crc32c, unmask
from trackpoint._format.dtypes import DType, enum_name, from_enum
from trackpoint._format.tensors import decode_strings, numeric_bytes_view
from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError

__all__ = ["BundleReader", "Entry"]

_MAX_INDEX_BYTES = 1 << 31
_MAX_RANK = 254  # TensorShape::MaxDimensions


def _decode_key(key: bytes) -> str:
    return key.decode("utf-8", "surrogateescape")


class Entry:
    """A parsed, validated index entry (header fields checked; data not yet read)."""

    __slots__ = ("dtype", "key", "proto", "shape")

    def __init__(self, key: str, proto: pb.BundleEntryProto, dtype: DType | None, shape: tuple[int, ...]) -> None:
        self.key = key
        self.proto = proto
        self.dtype = dtype
        self.shape = shape

    @property
    def dtype_enum(self) -> int:
        return self.proto.dtype

    @property
    def is_sliced(self) -> bool:
        return len(self.proto.slices) > 0


class BundleReader:
    """Read tensors from ``prefix.index`` and its ``prefix.data-*`` shards.

    Example:
        >>> import numpy as np, tempfile, os
        >>> from trackpoint._format.bundle_writer import BundleWriter
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> w = BundleWriter(prefix); w.add("x", np.arange(3, dtype=np.int64)); w.finish()
        >>> BundleReader(prefix).read("x")
        array([0, 1, 2])
    """

    def __init__(self, prefix: str, damaged_blocks: list[str] | None = None) -> None:
        """Open ``prefix.index``; with ``damaged_blocks``, skip and record damaged index blocks."""
        self.prefix = prefix
        self.index_path = naming.index_filename(prefix)
        try:
            with open(self.index_path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > _MAX_INDEX_BYTES:
                    raise InvalidArgumentError(f"{self.index_path}: index of {size} bytes is implausibly large")
                data = f.read()
        except FileNotFoundError as exc:
            raise NotFoundError(
                f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for {prefix}: "
                f"{self.index_path} does not exist. Pass the checkpoint prefix (e.g. 'dir/ckpt-1', without "
                "'.index'), or a directory holding a 'checkpoint' state file."
            ) from exc
        except IsADirectoryError as exc:
            raise NotFoundError(f"{self.index_path} is a directory, not a checkpoint index") from exc
        items = sstable.read_table(data, self.index_path, damaged_blocks)
        if not items or items[0][0] != b"":
            raise DataLossError(f"{self.index_path}: no bundle header entry; not a TensorFlow checkpoint index")
        header = pb.BundleHeaderProto()
        try:
            header.ParseFromString(items[0][1])
        except Exception as exc:  # protobuf's DecodeError
            raise DataLossError(f"{self.index_path}: malformed bundle header: {exc}") from exc
        if header.version.min_consumer > 1 or 1 in header.version.bad_consumers:
            raise InvalidArgumentError(
                f"{self.index_path}: written by a newer format (min_consumer={header.version.min_consumer}); "
                "upgrade trackpoint"
            )
        if header.num_shards < 1:
            raise DataLossError(f"{self.index_path}: header declares {header.num_shards} data shards")
        if len(items) - 1 < header.num_shards and header.num_shards > 1:
            # every shard holds at least one entry; this bounds what a hostile header can claim
            raise DataLossError(f"{self.index_path}: {header.num_shards} shards declared for {len(items) - 1} entries")
        self.num_shards = header.num_shards
        self.big_endian = header.endianness == pb.BundleHeaderProto.BIG
        self._raw: dict[bytes, bytes] = dict(items[1:])
        self._entries: dict[bytes, Entry] = {}
        self._fds: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- index --------------------------------------------------------------------------

    def raw_keys(self) -> Iterator[bytes]:
        """All non-header keys in index order, slice entries included."""
        return iter(self._raw)

    def __contains__(self, key: str) -> bool:
        return key.encode("utf-8", "surrogateescape") in self._raw

    def entry(self, key: str | bytes) -> Entry:
        """The validated entry for ``key``.

        Raises:
            NotFoundError: No such key.
            DataLossError / InvalidArgumentError: The entry is malformed.
        """
        raw_key = key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")
        cached = self._entries.get(raw_key)
        if cached is not None:
            return cached
        value = self._raw.get(raw_key)
        name = _decode_key(raw_key)
        if value is None:
            raise NotFoundError(f"Key {name} not found in checkpoint {self.prefix}")
        proto = pb.BundleEntryProto()
        try:
            proto.ParseFromString(value)
        except Exception as exc:
            raise DataLossError(f"{self.index_path}: malformed entry for key {name!r}: {exc}") from exc
        if proto.shape.unknown_rank or len(proto.shape.dim) > _MAX_RANK:
            raise DataLossError(f"{self.index_path}: key {name!r} has an invalid shape")
        shape = tuple(d.size for d in proto.shape.dim)
        if any(d < 0 for d in shape):
            raise DataLossError(f"{self.index_path}: key {name!r} has a negative dimension in {list(shape)}")
        entry = Entry(name, proto, from_enum(proto.dtype), shape)
        self._entries[raw_key] = entry
        return entry

    # -- data ---------------------------------------------------------------------------

    def _shard_fd(self, shard_id: int, key: str) -> tuple[int, int]:
        if not 0 <= shard_id < self.num_shards:
            raise DataLossError(
                f"{self.index_path}: key {key!r} names data shard {shard_id} but the header declares {self.num_shards}"
            )
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"reader for {self.prefix} is closed")
            cached = self._fds.get(shard_id)
            if cached is not None:
                return cached
            path = naming.data_filename(self.prefix, shard_id, self.num_shards)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError as exc:
                raise NotFoundError(
                    f"{path}: data shard of {self.prefix} is missing (needed for key {key!r}); "
                    "the checkpoint is incomplete: copy every '.data-*' file next to its '.index'"
                ) from exc
            self._fds[shard_id] = (fd, os.fstat(fd).st_size)
            return self._fds[shard_id]

    def _check_span(self, entry: Entry) -> tuple[int, str]:
        """Check that the entry's bytes lie inside its shard file; return ``(fd, path)``.

        Called before anything is allocated for the entry, so a hostile size or shape can
        never cost more memory than the file itself holds.
        """
        proto = entry.proto
        fd, file_size = self._shard_fd(proto.shard_id, entry.key)
        path = naming.data_filename(self.prefix, proto.shard_id, self.num_shards)
        if proto.offset < 0 or proto.size < 0 or proto.offset + proto.size > file_size:
            raise DataLossError(
                f"{path}: key {entry.key!r} spans bytes [{proto.offset}, {proto.offset + proto.size}) but the file "
                f"holds {file_size}; the data file is truncated or the index is damaged"
            )
        return fd, path

    def _read_bytes(self, entry: Entry, dest: memoryview | None = None, verify: bool = True) -> memoryview:
        """Read an entry's stored bytes (into ``dest`` if given) and verify the crc.

        String tensors pass ``verify=False``: their crc is not over the stored bytes but over
        the lengths as fixed-width integers, so :func:`decode_strings` checks it.
        """
        proto = entry.proto
        fd, path = self._check_span(entry)
        buf = dest if dest is not None else memoryview(bytearray(proto.size))
        done = 0
        while done < proto.size:
            n = os.preadv(fd, [buf[done:]], proto.offset + done)
            if n <= 0:
                raise DataLossError(f"{path}: unexpected end of file reading key {entry.key!r}")
            done += n
        if verify and crc32c(buf) != unmask(proto.crc32c):
            raise DataLossError(
                f"{path}: checksum mismatch for key {entry.key!r}; the data file is damaged. "
                "Restore from another checkpoint or re-save"
            )
        return buf

    def _check_numeric(self, entry: Entry) -> DType:
        dtype = entry.dtype
        if dtype is None:
            raise InvalidArgumentError(
                f"{self.prefix}: key {entry.key!r} has dtype {enum_name(entry.dtype_enum)}, which trackpoint cannot "
                "convert to numpy"
            )
        if not dtype.is_string and not entry.is_sliced:
            expected = math.prod(entry.shape) * dtype.numpy.itemsize
            if expected != entry.proto.size:
                raise DataLossError(
                    f"{self.index_path}: invalid size in bundle entry {entry.key!r}: shape {list(entry.shape)} of "
                    f"{dtype.name} needs {expected} bytes but the entry holds {entry.proto.size}"
                )
        return dtype

    def read(self, key: str, out: np.ndarray | None = None) -> np.ndarray | bytes:
        """Read one tensor, assembling slices; verify its checksums.

        Args:
            key: The tensor's key.
            out: Optional C-contiguous writable array of the stored dtype and shape to read
                into (no allocation). On a checksum error its contents are undefined.

        Returns:
            A numpy array (0-d for scalars), or ``bytes`` for a scalar string.
        """
        entry = self.entry(key)
        dtype = self._check_numeric(entry)
        if out is not None:
            self._check_out(entry, dtype, out)
        if entry.is_sliced:
            return self._read_sliced(entry, dtype, out)
        return self._read_plain(entry, dtype, out)

    def _check_out(self, entry: Entry, dtype: DType, out: np.ndarray) -> None:
        if dtype.is_string or out.dtype != dtype.numpy or out.shape != entry.shape:
            raise InvalidArgumentError(
                f"{self.prefix}: key {entry.key!r} is {dtype.name}{list(entry.shape)}; cannot read it into an array "
                f"of {out.dtype}{list(out.shape)}"
            )
        if not (out.flags.c_contiguous and out.flags.writeable):
            raise InvalidArgumentError(f"{entry.key!r}: the destination array must be C-contiguous and writable")

    def _read_plain(self, entry: Entry, dtype: DType, out: np.ndarray | None) -> np.ndarray | bytes:
        if dtype.is_string:
            if self.big_endian:
                raise InvalidArgumentError(
                    f"{self.prefix}: key {entry.key!r}: string tensors of big-endian checkpoints are not supported"
                )
            if math.prod(entry.shape) > entry.proto.size:
                raise DataLossError(
                    f"{self.index_path}: key {entry.key!r} declares {math.prod(entry.shape)} strings in "
                    f"{entry.proto.size} bytes"
                )
            path = naming.data_filename(self.prefix, entry.proto.shard_id, self.num_shards)
            return decode_strings(
                self._read_bytes(entry, verify=False), entry.shape, unmask(entry.proto.crc32c), f"{path}: key {entry.key!r}"
            )
        self._check_span(entry)
        array = out if out is not None else np.empty(entry.shape, dtype=dtype.numpy)
        self._read_bytes(entry, numeric_bytes_view(array) if array.size else memoryview(b""))
        if self.big_endian:
            array.byteswap(inplace=True)
        return array

    def _read_sliced(self, entry: Entry, dtype: DType, out: np.ndarray | None) -> np.ndarray:
        full_shape = entry.shape
        total = math.prod(full_shape)
        boxes = []
        covered = 0
        for proto in entry.proto.slices:
            extents = slices.extents_from_proto(proto)
            try:
                bounds = slices.resolve(extents, full_shape, f"{self.index_path}: key {entry.key!r}")
            except InvalidArgumentError as exc:
                raise DataLossError(str(exc)) from exc
            boxes.append((extents, bounds))
            covered += slices.volume(bounds)
        if covered != total:
            raise DataLossError(
                f"{self.index_path}: slices of key {entry.key!r} cover {covered} of its {total} elements "
                "(overlapping or incomplete); the checkpoint is damaged or a shard's index was lost"
            )
        _check_disjoint([b for _, b in boxes], entry.key, self.index_path)
        # Slices are disjoint and their volumes add up to the whole, so they cover it exactly.
        # Every part is validated against its file before the whole tensor is allocated.
        parts = []
        for extents, bounds in boxes:
            part_key = slices.encode_slice_key(entry.key, extents)
            if part_key not in self._raw:
                raise DataLossError(f"{self.index_path}: slice {list(bounds)} of key {entry.key!r} has no entry")
            part = self.entry(part_key)
            expected = tuple(stop - start for start, stop in bounds)
            if part.dtype_enum != entry.dtype_enum or part.shape != expected or part.is_sliced:
                raise DataLossError(
                    f"{self.index_path}: slice {list(bounds)} of key {entry.key!r} is stored as "
                    f"{enum_name(part.dtype_enum)}{list(part.shape)}, expected {dtype.enum_name}{list(expected)}"
                )
            self._check_numeric(part)
            self._check_span(part)
            parts.append((part, bounds))
        result = out if out is not None else np.empty(full_shape, dtype=dtype.numpy)
        for part, bounds in parts:
            result[tuple(slice(start, stop) for start, stop in bounds)] = self._read_plain(part, dtype, None)
        return result

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for fd, _ in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def __enter__(self) -> BundleReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _check_disjoint(boxes: list[tuple[tuple[int, int], ...]], key: str, path: str) -> None:
    """Raise if any two slices overlap (sweep along the first dimension)."""
    if not boxes or not boxes[0]:
        if len(boxes) > 1:
            raise DataLossError(f"{path}: scalar key {key!r} has {len(boxes)} slices")
        return
    ordered = sorted(boxes)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if b[0][0] >= a[0][1]:
                break
            if all(bs < ae and as_ < be for (as_, ae), (bs, be) in zip(a, b)):
                raise DataLossError(f"{path}: slices {list(a)} and {list(b)} of key {key!r} overlap")
