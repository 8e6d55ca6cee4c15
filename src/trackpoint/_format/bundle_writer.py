"""Writing a bundle: tensors appended to ``.data`` shards, then one sorted ``.index``.

Output is byte-identical to TensorFlow's ``BundleWriter`` for the same tensors in the same
order: data packed densely with no alignment padding, entries in ``BundleEntryProto`` with
the shape always present, the header ``{num_shards, version.producer=1}`` under key ``""``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from trackpoint._format import chunked_write, slices, varint, wire
from trackpoint._format.crc import crc32c, mask
from trackpoint._format.direct_file import DirectFile, open_data_file
from trackpoint._format.dtypes import DTYPES, STRING, DType, from_numpy
from trackpoint._format.index_entries import IndexEntries, entry_head, entry_heads
from trackpoint._format.index_write import merge_shards, write_index
from trackpoint._format.keys import encode_key
from trackpoint._format.tensors import as_numeric_buffer, encode_strings, numeric_bytes_view
from trackpoint._format.threads import Background
from trackpoint._storage import atomic, naming
from trackpoint._storage.storage import storage_for
from trackpoint._storage.writeback import WRITEBACK_BYTES, start_writeback
from trackpoint.errors import InvalidArgumentError

__all__ = ["BundleWriter", "ShardWriter", "dtype_of", "encode_entry", "encode_entry_after"]

# numpy dtype -> DType for the numeric dtypes stored as they are (native byte order).
_NUMPY_DTYPES = {d.numpy: d for d in DTYPES.values() if not d.is_string}
_OVERLAP_BYTES = 4 << 20  # tensors this large are checksummed while they are written


def dtype_of(array: Any, key: str) -> DType:
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


# One-byte tags of the fields written here (see trackpoint._format.wire).
_SHARD_ID, _OFFSET, _SIZE, _CRC32C = (
    bytes((tag,)) for tag in (wire.ENTRY_SHARD_ID, wire.ENTRY_OFFSET, wire.ENTRY_SIZE, wire.ENTRY_CRC32C)
)


def encode_entry(dtype: int, shape: Sequence[int], shard_id: int, offset: int, size: int, crc: int) -> bytes:
    """A serialized ``BundleEntryProto`` for a plain tensor, as protobuf would encode it.

    For the tensors a save writes one by one outside :meth:`ShardWriter.add_many`'s columns
    (strings, slices); the tests check it against protobuf's encoding.
    """
    return encode_entry_after(entry_head(dtype, shape), shard_id, offset, size, crc)


def encode_entry_after(head: bytes, shard_id: int, offset: int, size: int, crc: int) -> bytes:
    """:func:`encode_entry` of a tensor whose dtype and shape fields are ``head`` (:func:`entry_head`)."""
    out = [head]
    if shard_id:
        out += [_SHARD_ID, varint.encode(shard_id)]
    if offset:
        out += [_OFFSET, varint.encode(offset)]
    if size:
        out += [_SIZE, varint.encode(size)]
    if crc:
        out += [_CRC32C, crc.to_bytes(4, "little")]
    return b"".join(out)


class ShardWriter:
    """Appends tensors to one ``.data`` file and records their entries.

    Shards are independent, so several can be written at once on different threads;
    :func:`merge_shards` then combines their entries the way TF's ``MergeBundles`` does.
    """

    def __init__(self, path: str, shard_id: int) -> None:
        storage = storage_for(path)
        self.path = path  # the final name; bytes go to temp_path until the bundle is published
        self.temp_path = storage.temp_path(path)
        self.shard_id = shard_id
        self.entries = IndexEntries()
        # full key -> (name, dtype, full shape, extents of each slice in write order)
        self.sliced: dict[bytes, tuple[str, DType, tuple[int, ...], list[slices.Extents]]] = {}
        # A copy staged for an upload (the final name is a URL) is read back at once from the
        # page cache and never renamed into place: writing it back or fsyncing it makes
        # nothing safer (a crash before the upload's commit commits nothing), it only costs.
        self._staged = storage.local_copies
        # A large buffer: saving many small tensors otherwise costs a system call every 8 KiB
        # (or, in the writer process, a file written around the page cache: see direct_file).
        self._file = open_data_file(self.temp_path, self._staged)
        self._offset = 0
        self._written_back = 0  # bytes whose writeback has been started (see writeback)
        # Writeback is started early through the page cache only (an O_DIRECT file has none).
        self._writes_back = not self._staged and not isinstance(self._file, DirectFile)

    def _start_writeback(self) -> None:
        """Start writing back what was written since the last call (see :mod:`writeback`)."""
        self._file.flush()
        start_writeback(self._file.fileno(), self._written_back, self._offset - self._written_back)
        self._written_back = self._offset

    @property
    def offset(self) -> int:
        """Where the next bytes appended go."""
        return self._offset

    def append(self, buffer: bytes | memoryview, crc: int = 0) -> tuple[int, int, int]:
        """Write ``buffer`` and record no entry; its offset, size and the crc32c continued from ``crc``."""
        offset = self._offset
        self._file.write(buffer)
        size = buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)
        self._offset += size
        if self._offset - self._written_back >= WRITEBACK_BYTES and self._writes_back:
            self._start_writeback()
        return offset, size, crc32c(buffer, crc)

    def _write(self, key: bytes, name: str, array: Any) -> None:
        if key in self.entries.encoded or key in self.sliced:
            raise InvalidArgumentError(f"{self.path}: adding duplicate key {name!r}", path=self.path, key=name)
        dtype = dtype_of(array, name)
        if dtype.is_string:
            shape = np.shape(array)
            data, crc = encode_strings(np.asarray(array, dtype=object), name)
            offset, size, _ = self.append(data)
        else:
            buf = as_numeric_buffer(np.asarray(array), dtype)
            shape = buf.shape
            offset, size, crc = self.append(numeric_bytes_view(buf))
            crc = mask(crc)
        self.entries.encoded[key] = encode_entry(dtype.enum, shape, self.shard_id, offset, size, crc)

    def add(self, key: str, array: Any) -> None:
        """Append a whole tensor (numpy array, ``bytes``/``str`` scalar or object array of bytes)."""
        self._write(encode_key(key), key, array)

    def add_chunks(self, key: str, dtype: DType, shape: Sequence[int], chunks: Iterable[memoryview]) -> None:
        """Append one numeric tensor given as its bytes in chunks (see :func:`.chunked_write.add_chunks`)."""
        chunked_write.add_chunks(self, key, dtype, shape, chunks)

    def add_many(self, tensors: Iterable[tuple[str, Any]]) -> None:
        """Append whole tensors in order; the same as :meth:`add` on each, faster for many small ones.

        A plain tensor (numeric, native byte order, C-contiguous) is written from its own
        buffer, and its entry is only a row of numbers until the index is written
        (:class:`~trackpoint._format.index_entries.IndexEntries`).
        """
        entries, sliced, shard_id = self.entries, self.sliced, self.shard_id
        names, heads, shard_ids, offsets, sizes, crcs = (
            entries.names,
            entries.heads,
            entries.shard_ids,
            entries.offsets,
            entries.sizes,
            entries.crcs,
        )
        known_heads = entry_heads()
        write = self._file.write
        offset = self._offset
        try:
            # One pass per tensor, every call in C but the head's: a save of many small
            # tensors spends its time here (see PERFORMANCE.md, "The first save"). A key
            # given twice is found when the index is built.
            for name, array in tensors:
                dtype = _NUMPY_DTYPES.get(array.dtype) if type(array) is np.ndarray else None
                size = array.nbytes if dtype is not None else 0
                plain = size and not (sliced and encode_key(name) in sliced)
                if plain and size >= _OVERLAP_BYTES and array.flags.c_contiguous:
                    # A large tensor: checksummed on another thread while this one writes it
                    # (both release the GIL), rather than one after the other.
                    pending_crc = Background(functools.partial(crc32c, array), "trackpoint-crc")
                    write(array)
                    crc = pending_crc.result()
                elif plain and size < _OVERLAP_BYTES:
                    try:
                        write(array)  # refuses a buffer that is not C-contiguous, writing nothing
                    except ValueError:
                        plain = False
                    else:
                        crc = crc32c(array)
                else:
                    plain = False
                if not plain:
                    self._offset = offset
                    held = slices.held_slices(array)
                    if held is not None:
                        for part in held:
                            self.add_slice(name, part.full_shape, part.extents, part.value)
                    else:
                        self._write(encode_key(name), name, array)  # anything unusual, errors included
                    offset = self._offset
                    continue
                offset += size
                if offset - self._written_back >= WRITEBACK_BYTES and self._writes_back:
                    self._offset = offset
                    self._start_writeback()
                names.append(name)
                head = known_heads.get((dtype.enum, array.shape))  # type: ignore[union-attr]
                heads.append(head if head is not None else entry_head(dtype.enum, array.shape))  # type: ignore[union-attr]
                shard_ids.append(shard_id)
                offsets.append(offset - size)
                sizes.append(size)
                crcs.append(crc)
        finally:
            self._offset = offset

    def add_slice(self, key: str, full_shape: Sequence[int], extents: slices.Extents, array: Any) -> None:
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
            self.add(key, array)
            return
        dtype = dtype_of(array, key)
        full_key = encode_key(key)
        if full_key in self.entries.encoded:  # stored whole as a plain row too: merge_shards finds it
            raise InvalidArgumentError(f"{self.path}: adding duplicate key {key!r}")
        previous = self.sliced.get(full_key)
        if previous is not None and previous[1:3] != (dtype, full_shape):
            raise InvalidArgumentError(
                f"{key}: slice of {dtype.name}{list(full_shape)} conflicts with earlier slices of "
                f"{previous[1].name}{list(previous[2])}"
            )
        self._write(slices.encode_slice_key(key, extents), key, array)
        if previous is None:
            previous = self.sliced[full_key] = (key, dtype, full_shape, [])
        previous[3].append(extents)

    def flush(self) -> None:
        """Hand buffered data to the operating system (not yet durable)."""
        if not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        """Flush and fsync the data (it is published later, by renaming; a staged copy is not fsynced)."""
        if not self._file.closed:
            try:
                self._file.flush()
                if not self._staged:
                    os.fsync(self._file.fileno())
            finally:
                self._file.close()

    def abort(self) -> None:
        """Drop the temporary file: close it without writing what is still buffered, then remove it.

        The file is removed even if closing fails. ``close()`` would flush the buffer first,
        which on a full disk fails with ENOSPC again: the error escaped before the removal,
        and the file kept holding the space.
        """
        try:
            if not self._file.closed:
                # Closing the raw file drops the buffer unwritten; the buffered file then counts
                # as closed, so neither a later close() nor its finalizer flushes.
                self._file.raw.close()
        except OSError:
            pass  # the descriptor is released either way (close(2) frees it even on error)
        finally:
            atomic.remove_quietly(self.temp_path)


class BundleWriter:
    """Write tensors into ``num_shards`` data files and one index, one call at a time.

    Examples:
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
        storage_for(prefix).prepare(prefix)
        self._prefix = prefix
        self._num_shards = num_shards
        self._shards: dict[int, ShardWriter] = {}

    def _shard(self, shard_id: int) -> ShardWriter:
        if not 0 <= shard_id < self._num_shards:
            raise InvalidArgumentError(f"{self._prefix}: shard {shard_id} outside 0..{self._num_shards - 1}")
        shard = self._shards.get(shard_id)
        if shard is None:
            path = naming.data_filename(self._prefix, shard_id, self._num_shards)
            shard = self._shards[shard_id] = ShardWriter(path, shard_id)
        return shard

    def add(self, key: str, array: Any, shard_id: int = 0) -> None:
        """Append a whole tensor to shard ``shard_id``."""
        self._shard(shard_id).add(key, array)

    def add_many(self, tensors: Iterable[tuple[str, Any]], shard_id: int = 0) -> None:
        """Append whole tensors in order to shard ``shard_id`` (see :meth:`ShardWriter.add_many`)."""
        self._shard(shard_id).add_many(tensors)

    def add_chunks(
        self, key: str, dtype: DType, shape: Sequence[int], chunks: Iterable[memoryview], shard_id: int = 0
    ) -> None:
        """Append one tensor given in chunks to shard ``shard_id`` (see :meth:`ShardWriter.add_chunks`)."""
        self._shard(shard_id).add_chunks(key, dtype, shape, chunks)

    def add_slice(
        self, key: str, full_shape: Sequence[int], extents: slices.Extents, array: Any, shard_id: int = 0
    ) -> None:
        """Append one slice of ``key`` to shard ``shard_id`` (see :meth:`ShardWriter.add_slice`)."""
        self._shard(shard_id).add_slice(key, full_shape, extents, array)

    def finish(self, whole_remedy: str | None = None) -> None:
        """Close every data file (creating empty ones for unused shards), write the index, and
        publish them all; on failure nothing is published and the temporary files are removed.

        ``whole_remedy``: every sliced tensor must be saved whole (see :func:`merge_shards`).
        """
        try:
            shards = [self._shard(shard_id) for shard_id in range(self._num_shards)]
            for shard in shards:
                shard.flush()
            data_files = [(shard.temp_path, shard.path) for shard in shards]
            storage = storage_for(self._prefix)
            placed: list[tuple[str, str]] = []

            # The data files are fsynced on another thread while this one builds the index:
            # fsync releases the GIL, and both must be durable before anything is published.
            # An object store takes them then too (see Storage.put_data), only the index
            # waiting for the commit.
            def close_all() -> None:
                for shard in shards:
                    shard.close()
                placed.extend(storage.put_data(data_files, self._prefix))

            closing = Background(close_all, "trackpoint-fsync")
            try:
                write_index(
                    self._prefix,
                    merge_shards(shards, whole_remedy),
                    self._num_shards,
                    data_files,
                    closing.result,
                    uploaded=placed,
                )
            except BaseException:
                closing.join()
                if placed:  # not committed: the objects put ahead go again
                    storage.withdraw(placed, self._prefix)
                raise
            finally:
                closing.join()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Give up: remove every temporary file written so far."""
        for shard in self._shards.values():
            shard.abort()
