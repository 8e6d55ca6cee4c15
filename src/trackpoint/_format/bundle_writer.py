"""Writing a bundle: tensors appended to ``.data`` shards, then one sorted ``.index``.

Output is byte-identical to TensorFlow's ``BundleWriter`` for the same tensors in the same
order: data packed densely with no alignment padding, entries in ``BundleEntryProto`` with
the shape always present, the header ``{num_shards, version.producer=1}`` under key ``""``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np

from trackpoint._format import naming, slices, sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.crc import crc32c, mask
from trackpoint._format.dtypes import STRING, DType, from_numpy
from trackpoint._format.tensors import as_numeric_buffer, encode_strings, numeric_bytes_view
from trackpoint.errors import InvalidArgumentError

__all__ = ["BundleWriter", "dtype_of", "header_bytes", "write_index"]

TENSOR_BUNDLE_VERSION = 1


def dtype_of(array: object, key: str) -> DType:
    """The checkpoint dtype of a numpy array (or bytes/str scalar), or a clear error."""
    if isinstance(array, (bytes, str)):
        return STRING
    dtype = from_numpy(np.asarray(array).dtype)
    if dtype is None:
        raise InvalidArgumentError(
            f"{key}: numpy dtype {np.asarray(array).dtype} has no TensorFlow checkpoint equivalent; "
            "cast it to a supported dtype (float16/32/64, bfloat16, int8-64, uint8-64, bool, complex, string)"
        )
    return dtype


def _shape_proto(shape: Sequence[int]) -> pb.TensorShapeProto:
    proto = pb.TensorShapeProto()
    for dim in shape:
        proto.dim.add().size = int(dim)
    return proto


def header_bytes(num_shards: int) -> bytes:
    header = pb.BundleHeaderProto(num_shards=num_shards)
    header.version.producer = TENSOR_BUNDLE_VERSION
    return header.SerializeToString()


def write_index(prefix: str, entries: dict[bytes, pb.BundleEntryProto], num_shards: int) -> None:
    """Write ``prefix.index`` atomically (temp name, then rename): readers see all or nothing."""
    items = [(b"", header_bytes(num_shards))]
    items += [(key, entries[key].SerializeToString()) for key in sorted(entries)]
    path = naming.index_filename(prefix)
    temp = f"{path}.tempstate{secrets.randbits(63)}"
    try:
        with open(temp, "wb") as f:
            f.write(sstable.build_table(items))
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


class _Shard:
    """One open ``.data`` file and its write position."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by BundleWriter.finish
        self.offset = 0

    def append(self, buffers: Sequence[bytes | memoryview]) -> tuple[int, int, int]:
        """Write the buffers contiguously; return ``(offset, size, masked crc)``."""
        offset, crc, size = self.offset, 0, 0
        for buf in buffers:
            self.file.write(buf)
            crc = crc32c(buf, crc)
            size += len(buf) if isinstance(buf, bytes) else buf.nbytes
        self.offset += size
        return offset, size, mask(crc)


class BundleWriter:
    """Write tensors into ``num_shards`` data files and one index.

    Example:
        >>> import numpy as np, tempfile, os
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> w = BundleWriter(prefix)
        >>> w.add("x", np.arange(3, dtype=np.float32))
        >>> w.finish()
        >>> sorted(os.listdir(os.path.dirname(prefix)))
        ['ckpt.data-00000-of-00001', 'ckpt.index']
    """

    def __init__(self, prefix: str, num_shards: int = 1) -> None:
        if num_shards < 1:
            raise InvalidArgumentError(f"{prefix}: a bundle needs at least one shard, got {num_shards}")
        directory = os.path.dirname(prefix)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._prefix = prefix
        self._num_shards = num_shards
        self._shards: dict[int, _Shard] = {}
        self._entries: dict[bytes, pb.BundleEntryProto] = {}
        self._sliced: dict[bytes, tuple[DType, tuple[int, ...]]] = {}

    def _shard(self, shard_id: int) -> _Shard:
        if not 0 <= shard_id < self._num_shards:
            raise InvalidArgumentError(f"{self._prefix}: shard {shard_id} outside 0..{self._num_shards - 1}")
        shard = self._shards.get(shard_id)
        if shard is None:
            shard = self._shards[shard_id] = _Shard(naming.data_filename(self._prefix, shard_id, self._num_shards))
        return shard

    def _write(self, key: bytes, name: str, array: object, shard_id: int) -> pb.BundleEntryProto:
        if key in self._entries:
            raise InvalidArgumentError(f"{self._prefix}: adding duplicate key {name!r}")
        dtype = dtype_of(array, name)
        shard = self._shard(shard_id)
        if dtype.is_string:
            shape = np.shape(array)
            data, crc = encode_strings(np.asarray(array, dtype=object), name)
            offset, size, _ = shard.append([data])
        else:
            buf = as_numeric_buffer(np.asarray(array), dtype)
            shape = buf.shape
            offset, size, crc = shard.append([numeric_bytes_view(buf)])
        entry = pb.BundleEntryProto(dtype=dtype.enum, shard_id=shard_id, offset=offset, size=size, crc32c=crc)
        entry.shape.CopyFrom(_shape_proto(shape))
        self._entries[key] = entry
        return entry

    def add(self, key: str, array: object, shard_id: int = 0) -> None:
        """Append a whole tensor (numpy array, ``bytes``/``str`` scalar or object array of bytes)."""
        self._write(key.encode("utf-8", "surrogateescape"), key, array, shard_id)

    def add_slice(self, key: str, full_shape: Sequence[int], extents: slices.Extents, array: object,
                  shard_id: int = 0) -> None:
        """Append one slice of the tensor ``key`` whose whole shape is ``full_shape``.

        A slice covering the whole tensor is stored as a plain entry, as TF does.

        Raises:
            InvalidArgumentError: The slice does not fit, its data has the wrong shape, or the
                dtype or full shape disagree with earlier slices of the same key.
        """
        full_shape = tuple(int(d) for d in full_shape)
        bounds = slices.resolve(extents, full_shape, key)
        expected = tuple(stop - start for start, stop in bounds)
        if np.shape(array) != expected:
            raise InvalidArgumentError(f"{key}: slice data of shape {np.shape(array)} for a slice of shape {expected}")
        if slices.is_full(extents, full_shape):
            self.add(key, array, shard_id)
            return
        dtype = dtype_of(array, key)
        full_key = key.encode("utf-8", "surrogateescape")
        previous = self._sliced.get(full_key)
        if previous is not None and previous != (dtype, full_shape):
            raise InvalidArgumentError(
                f"{key}: slice of {dtype.name}{list(full_shape)} conflicts with earlier slices of "
                f"{previous[0].name}{list(previous[1])}"
            )
        if previous is None and full_key in self._entries:
            raise InvalidArgumentError(f"{self._prefix}: adding duplicate key {key!r}")
        self._write(slices.encode_slice_key(key, extents), key, array, shard_id)
        full = self._entries.get(full_key)
        if full is None:
            # The full entry carries the shard of its first slice, as TF's merge leaves it.
            full = self._entries[full_key] = pb.BundleEntryProto(dtype=dtype.enum, shard_id=shard_id)
            full.shape.CopyFrom(_shape_proto(full_shape))
            self._sliced[full_key] = (dtype, full_shape)
        full.slices.append(slices.extents_to_proto(extents))

    def finish(self) -> None:
        """Close every data file (creating empty ones for unused shards) and write the index."""
        for shard_id in range(self._num_shards):
            self._shard(shard_id)
        for shard in self._shards.values():
            shard.file.close()
        write_index(self._prefix, self._entries, self._num_shards)
