"""Reading a bundle lazily: the index is parsed on open, each tensor read on demand.

Nothing in the files is trusted. Before any allocation, every entry is checked against
what its shard file can hold (dtype known, dims non-negative, ``size`` equal to the
element count times the element size, ``offset + size`` inside the file, shard id below
the shard count, slices inside the tensor, disjoint and complete), and every tensor's
crc32c is verified against the bytes read.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackpoint._format import files, naming, previous, slices, sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.crc import MASK_DELTA, crc32c, crc32c_combine, raw_crc32c, unmask
from trackpoint._format.dtypes import DTYPES, DType, enum_name, from_enum
from trackpoint._format.entry_columns import EntryColumns, decode_spans, distinct, padded
from trackpoint._format.slices import readable_key
from trackpoint._format.tensors import decode_strings, numeric_bytes_view
from trackpoint._format.threads import Background, parallel_map
from trackpoint.errors import CheckpointError, DataLossError, InvalidArgumentError, NotFoundError

__all__ = ["BundleReader", "Entry"]

_MAX_INDEX_BYTES = 1 << 31
_PARALLEL_READ_BYTES = 1 << 20  # tensors this large are read on their own, not in runs
_RUN_BYTES = 4 << 20  # smaller ones are fetched in runs of up to this many bytes
_RUN_GAP = 64 << 10  # bytes of unrelated data worth reading through rather than seeking past
_READ_AHEAD_ROWS = 256  # tensors per batch, on average, from which the next batch is read ahead
_READ_THREADS = min(4, os.cpu_count() or 1)
_CHUNK_BYTES = 2 << 20  # large tensors are read in chunks of this size, overlapping read and crc (2 MiB measured best)
_MAX_RANK = 254  # TensorShape::MaxDimensions


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What tells one file from another at the same path: device, inode, size, modification time."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _decode_key(key: bytes) -> str:
    return key.decode("utf-8", "surrogateescape")


def _encode_key(key: str) -> bytes:
    """A key's bytes in the index; b"" (the header's key, never a tensor's) for a str no index holds."""
    try:
        return key.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no decoded key contains
        return b""


class Entry:
    """A parsed, validated index entry (header fields checked; data not yet read)."""

    __slots__ = ("_raw", "crc32c", "dtype", "dtype_enum", "is_sliced", "key", "offset", "shape", "shard_id", "size",
                 "slices")

    def __init__(self, key: str, raw: bytes, fields: tuple[int, tuple[int, ...], int, int, int, int, list[Any]],
                 dtype: DType | None) -> None:
        self.key = key
        self._raw = raw
        self.dtype_enum, self.shape, self.shard_id, self.offset, self.size, self.crc32c, self.slices = fields
        self.dtype = dtype
        self.is_sliced = bool(self.slices)

    @property
    def proto(self) -> pb.BundleEntryProto:
        """The entry as a protobuf message (parsed on demand)."""
        return pb.BundleEntryProto.FromString(self._raw)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_entry(buf: bytes) -> tuple[int, tuple[int, ...], int, int, int, int, tuple[Any, ...]] | None:
    """Decode the fields of a plain ``BundleEntryProto`` quickly; None for anything unusual.

    Entries with slices, dimension names, unknown rank or unknown fields return None and go
    through the protobuf parser instead, and so does a truncated entry (IndexError, which
    the caller catches). One entry at a time, for single reads and listings: restores decode
    all their entries at once with :mod:`.entry_columns`, whose numpy calls cost a fixed
    0.2 ms but well under a microsecond per entry.
    """
    dtype = shard = offset = size = crc = 0
    shape: list[int] = []
    pos, end = 0, len(buf)
    while pos < end:
        tag = buf[pos]
        if tag == 0x12:  # shape: TensorShapeProto { repeated Dim dim = 2 { int64 size = 1 } }
            length = buf[pos + 1]
            if length >= 0x80:
                length, pos = _varint(buf, pos + 1)
            else:
                pos += 2
            shape_end = pos + length
            if shape_end > end:
                return None
            while pos < shape_end:
                if buf[pos] != 0x12:
                    return None
                dim_len = buf[pos + 1]
                if dim_len == 0:  # a dimension of size 0
                    shape.append(0)
                    pos += 2
                    continue
                if dim_len >= 0x80 or buf[pos + 2] != 0x08:
                    return None
                dim_end = pos + 2 + dim_len
                dim, pos = _varint(buf, pos + 3)
                if pos != dim_end:
                    return None
                shape.append(_signed(dim))
            if pos != shape_end:
                return None
            continue
        if tag == 0x35:  # crc32c, fixed32
            if pos + 5 > end:
                return None
            crc = int.from_bytes(buf[pos + 1 : pos + 5], "little")
            pos += 5
            continue
        value = buf[pos + 1]
        if value < 0x80:
            pos += 2
        else:
            value, pos = _varint(buf, pos + 1)
        if tag == 0x20:
            offset = _signed(value)
        elif tag == 0x28:
            size = _signed(value)
        elif tag == 0x08:
            dtype = value
        elif tag == 0x18:
            shard = _signed(value)
        else:
            return None
    if pos != end:
        return None
    return dtype, tuple(shape), shard, offset, size, crc, ()


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A varint at ``buf[pos]`` (IndexError when truncated, ValueError when over-long)."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("over-long varint")


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
        # An overwrite of the prefix cut short inside TF's window is read from its kept
        # previous version (see trackpoint._format.previous).
        self.prefix = previous.readable_prefix(prefix)
        self.index_path = naming.index_filename(self.prefix)
        try:
            data, stat = files.read_regular(self.index_path, "checkpoint index", _MAX_INDEX_BYTES)
        except NotFoundError as exc:
            raise NotFoundError(
                f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for {prefix}: "
                f"{self.index_path} does not exist. Pass the checkpoint prefix (e.g. 'dir/ckpt-1', without "
                "'.index'), or a directory holding a 'checkpoint' state file."
            ) from exc
        table = sstable.read_table_spans(data, self.index_path, damaged_blocks)
        if not table.keys or table.keys[0] != b"":
            raise DataLossError(f"{self.index_path}: no bundle header entry; not a TensorFlow checkpoint index")
        header = pb.BundleHeaderProto()
        try:
            header.ParseFromString(table.value(0))
        except Exception as exc:  # protobuf's DecodeError
            raise DataLossError(f"{self.index_path}: malformed bundle header: {exc}") from exc
        if header.version.min_consumer > 1 or 1 in header.version.bad_consumers:
            raise InvalidArgumentError(
                f"{self.index_path}: written by a newer format (min_consumer={header.version.min_consumer}); "
                "upgrade trackpoint"
            )
        if header.num_shards < 1:
            raise DataLossError(f"{self.index_path}: header declares {header.num_shards} data shards")
        count = len(table.keys) - 1
        if count < header.num_shards and header.num_shards > 1:
            # every shard holds at least one entry; this bounds what a hostile header can claim
            raise DataLossError(f"{self.index_path}: {header.num_shards} shards declared for {count} entries")
        self.num_shards = header.num_shards
        self.big_endian = header.endianness == pb.BundleHeaderProto.BIG
        self._table = table
        self._rows: dict[bytes, int] = dict(zip(table.keys[1:], range(1, count + 1)))  # key -> row of the table
        self._spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # for entry_columns, made on demand
        self._fds: dict[int, tuple[int, int]] = {}
        # What each file was when first opened, so that a reopen after release_files() can
        # tell whether it still is the checkpoint this index describes.
        self._index_identity = _identity(stat)
        self._identities: dict[int, tuple[int, int, int, int]] = {}
        self._released = False
        self._lock = threading.Lock()
        self._closed = False

    # -- index --------------------------------------------------------------------------

    def raw_keys(self) -> Iterator[bytes]:
        """All non-header keys in index order, slice entries included."""
        return iter(self._rows)

    def __contains__(self, key: str | bytes) -> bool:
        return (key if isinstance(key, bytes) else _encode_key(key)) in self._rows

    def _entry_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The index's values as :func:`decode_spans` takes them: data, starts, ends by row."""
        if self._spans is None:
            table = self._table
            self._spans = (padded(table.data), np.array(table.starts, np.int64), np.array(table.ends, np.int64))
        return self._spans

    def entry(self, key: str | bytes) -> Entry:
        """The validated entry for ``key``.

        Raises:
            NotFoundError: No such key.
            DataLossError / InvalidArgumentError: The entry is malformed.
        """
        # Not cached: a restore decodes each entry once, and keeping tens of thousands of
        # them alive with the reader would only feed the garbage collector.
        if isinstance(key, bytes):
            raw_key, name = key, _decode_key(key)
        else:
            raw_key, name = _encode_key(key), key
        row = self._rows.get(raw_key)
        if row is None:
            raise NotFoundError(f"Key {readable_key(name)} not found in checkpoint {self.prefix}")
        value = self._table.value(row)
        try:
            fields = _decode_entry(value)
        except (ValueError, IndexError):
            fields = None  # malformed: protobuf's parser says what is wrong
        if fields is None:
            proto = pb.BundleEntryProto()
            try:
                proto.ParseFromString(value)
            except Exception as exc:
                raise DataLossError(
                    f"{self.index_path}: malformed entry for key {readable_key(name)!r}: {exc}"
                ) from exc
            if proto.shape.unknown_rank:
                raise DataLossError(f"{self.index_path}: key {readable_key(name)!r} has an invalid shape")
            fields = (proto.dtype, tuple(d.size for d in proto.shape.dim), proto.shard_id, proto.offset, proto.size,
                      proto.crc32c, list(proto.slices))
        shape = fields[1]
        if shape and (len(shape) > _MAX_RANK or min(shape) < 0):
            if len(shape) > _MAX_RANK:
                raise DataLossError(f"{self.index_path}: key {readable_key(name)!r} has an invalid shape")
            raise DataLossError(
                f"{self.index_path}: key {readable_key(name)!r} has a negative dimension in {list(shape)}"
            )
        return Entry(name, value, fields, from_enum(fields[0]))

    # -- data ---------------------------------------------------------------------------

    def _shard_fd(self, shard_id: int, key: str) -> tuple[int, int]:
        if not 0 <= shard_id < self.num_shards:
            raise DataLossError(
                f"{self.index_path}: key {readable_key(key)!r} names data shard {shard_id} but the header declares "
                f"{self.num_shards}"
            )
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"reader for {self.prefix} is closed")
            cached = self._fds.get(shard_id)
            if cached is not None:
                return cached
            path = naming.data_filename(self.prefix, shard_id, self.num_shards)
            try:
                fd, stat = files.open_regular(path, "data shard")
            except NotFoundError as exc:
                if self._released or self._index_changed():
                    raise self._changed(NotFoundError, path, key, "this data shard was deleted") from exc
                raise NotFoundError(
                    f"{path}: data shard of {self.prefix} is missing (needed for key {readable_key(key)!r}); "
                    "the checkpoint is incomplete: copy every '.data-*' file next to its '.index'"
                ) from exc
            try:
                identity = _identity(stat)
                if self._released:
                    self._check_unchanged(shard_id, identity, path, key)
            except BaseException:
                os.close(fd)
                raise
            self._identities.setdefault(shard_id, identity)
            self._fds[shard_id] = (fd, identity[2])
            return self._fds[shard_id]

    def _check_unchanged(self, shard_id: int, identity: tuple[int, int, int, int], path: str, key: str) -> None:
        """After :meth:`release_files`: raise unless a reopened data file is the one this index describes.

        A shard read before the release must be the very file read then (same device,
        inode, size and modification time); one never read is trusted while the index file
        is unchanged, since every save replaces the index after its data files.
        """
        known = self._identities.get(shard_id)
        changed = identity != known if known is not None else self._index_changed()
        if changed:
            raise self._changed(DataLossError, path, key, "this data file was replaced or modified")

    def _index_changed(self) -> bool:
        """Whether the index file at its path is no longer the one this reader parsed (or is gone)."""
        try:
            return _identity(os.stat(self.index_path)) != self._index_identity
        except OSError:
            return True

    def _changed(self, error: type[CheckpointError], path: str, key: str, what: str) -> CheckpointError:
        """The error for a checkpoint deleted or replaced under this reader: the remedy is to read it again.

        Not to repair it: the files were whole when the index was read, and copying or
        re-saving them, right for a checkpoint that never was complete, would not help.
        """
        pending = " (a value a restore kept for an object created later)" if self._released else ""
        return error(
            f"{path}: the checkpoint {self.prefix} was deleted or replaced while being read: {what} after its index "
            f"was read, so key {readable_key(key)!r}{pending} cannot be read from it; restore again (or reopen it) to "
            "read the checkpoint as it is now"
        )

    def _damaged(self, path: str, key: str, message: str) -> CheckpointError:
        """A DataLossError for bad bytes in a data file, or the error of :meth:`_changed` when the
        checkpoint was replaced since its index was read (new data files under the old index)."""
        if self._index_changed():
            return self._changed(DataLossError, path, key, "its files were replaced or modified")
        return DataLossError(message)

    def release_files(self) -> None:
        """Close the data files now; a later read reopens them, and raises if they changed meanwhile.

        A restore calls this when it returns, so that no file stays open for as long as its
        status lives or values wait for objects not created yet (restore-on-create). When
        such a value is needed, its file is reopened for that read and closed again; if the
        checkpoint was replaced, modified or deleted in between, the read raises
        :class:`~trackpoint.errors.DataLossError` (or ``NotFoundError``) naming the file and
        key instead of returning other values. Unlike :meth:`close`, the reader stays usable.
        """
        with self._lock:
            self._released = True
            fds, self._fds = list(self._fds.values()), {}
        for fd, _ in fds:
            os.close(fd)

    def _data_path(self, entry: Entry) -> str:
        return naming.data_filename(self.prefix, entry.shard_id, self.num_shards)

    def _check_span(self, entry: Entry) -> int:
        """Check that the entry's bytes lie inside its shard file; return the file's descriptor.

        Called before anything is allocated for the entry, so a hostile size or shape can
        never cost more memory than the file itself holds.
        """
        fd, file_size = self._shard_fd(entry.shard_id, entry.key)
        if entry.offset < 0 or entry.size < 0 or entry.offset + entry.size > file_size:
            path = self._data_path(entry)
            raise self._damaged(path, entry.key,
                f"{path}: key {readable_key(entry.key)!r} spans bytes [{entry.offset}, {entry.offset + entry.size}) "
                f"but the file holds {file_size}; the data file is truncated or the index is damaged"
            )
        return fd

    def _read_bytes(self, entry: Entry, dest: memoryview | None = None, verify: bool = True) -> memoryview:
        """Read an entry's stored bytes (into ``dest`` if given) and verify the crc.

        String tensors pass ``verify=False``: their crc is not over the stored bytes but over
        the lengths as fixed-width integers, so :func:`decode_strings` checks it.
        """
        fd = self._check_span(entry)
        size = entry.size
        buf = dest if dest is not None else memoryview(bytearray(size))
        if verify and size >= 2 * _CHUNK_BYTES:
            crc = self._read_parallel(fd, entry, buf)
        else:
            self._pread(fd, entry, buf, 0, size)
            crc = crc32c(buf) if verify else 0
        if verify and crc != unmask(entry.crc32c):
            path = self._data_path(entry)
            raise self._damaged(path, entry.key,
                f"{path}: checksum mismatch for key {readable_key(entry.key)!r}; the data file is damaged. "
                "Restore from another checkpoint or re-save"
            )
        return buf

    def _pread(self, fd: int, entry: Entry, buf: memoryview, start: int, stop: int) -> None:
        done = start
        while done < stop:
            n = os.preadv(fd, [buf[done:stop]], entry.offset + done)
            if n <= 0:
                path = self._data_path(entry)
                raise self._damaged(path, entry.key,
                                    f"{path}: unexpected end of file reading key {readable_key(entry.key)!r}")
            done += n

    def _read_parallel(self, fd: int, entry: Entry, buf: memoryview) -> int:
        """Read a large tensor with several threads, each checksumming its own part; return the crc.

        File reads and crc32c both release the GIL, so the parts proceed at once on several
        cores; each thread works in cache-sized chunks, checksumming what it has just read.
        The parts' crcs are then combined. No memory is used beyond the destination.
        """
        size = entry.size
        parts = min(_READ_THREADS, max(1, size // _CHUNK_BYTES))
        step = -(-size // parts)

        def read_part(start: int) -> int:
            stop = min(start + step, size)
            crc = 0
            for chunk in range(start, stop, _CHUNK_BYTES):
                end = min(chunk + _CHUNK_BYTES, stop)
                self._pread(fd, entry, buf, chunk, end)
                crc = crc32c(buf[chunk:end], crc)
            return crc

        starts = list(range(0, size, step))
        crcs = parallel_map(read_part, starts, len(starts))
        crc = crcs[0]
        for start, part_crc in zip(starts[1:], crcs[1:]):
            crc = crc32c_combine(crc, part_crc, min(start + step, size) - start)
        return crc

    def _check_numeric(self, entry: Entry) -> DType:
        dtype = entry.dtype
        if dtype is None:
            raise InvalidArgumentError(
                f"{self.prefix}: key {readable_key(entry.key)!r} has dtype {enum_name(entry.dtype_enum)}, which "
                "trackpoint cannot convert to numpy"
            )
        if not dtype.is_string and not entry.is_sliced:
            expected = math.prod(entry.shape) * dtype.numpy.itemsize
            if expected != entry.size:
                raise DataLossError(
                    f"{self.index_path}: invalid size in bundle entry {readable_key(entry.key)!r}: shape "
                    f"{list(entry.shape)} of {dtype.name} needs {expected} bytes but the entry holds {entry.size}"
                )
        return dtype

    def read(self, key: str | bytes, out: np.ndarray | None = None) -> np.ndarray | bytes:
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

    def read_many(self, keys: Sequence[str]) -> list[np.ndarray | bytes]:
        """Read several tensors at once (see :meth:`read_batches`); results in the order of ``keys``."""
        return [value for batch in self.read_batches(keys, 1 << 62) for value in batch]

    def read_batches(self, keys: Sequence[str], batch_bytes: int) -> Iterator[list[np.ndarray | bytes]]:
        """Read tensors, checksums verified, yielding their values in order batch by batch.

        A caller that stores the values as they come needs no more memory than ``batch_bytes``
        (or one larger tensor): at most that much is read and not yet consumed at any time.
        Every entry is decoded and checked against the files before the first batch is read.

        Small plain tensors lying next to each other in a shard are fetched with one read and
        handed out as read-only views of it; each large one is read by a few threads at once,
        since file reads and crc32c release the GIL. When batches hold many small tensors,
        the next one's are read on a helper thread while one batch is checked and handed out
        (on a first restore that read spends much of its time faulting in new memory, without
        the GIL); batches are then half of ``batch_bytes`` so that two fit.
        """
        plan = _ReadPlan(self, keys)
        batches = list(plan.batches(batch_bytes))
        # Reading ahead pays when a batch holds many tensors, whose checks and hand-out keep
        # this thread busy while the helper reads; with a few larger ones there is little to
        # overlap, and a thread and the hand-overs of the GIL per batch cost more than they save.
        read_ahead = len(keys) >= _READ_AHEAD_ROWS * len(batches)
        if read_ahead:
            batches = list(plan.batches(max(1, batch_bytes // 2)))
        totals = [int(plan.batch_sizes[start:stop].sum()) for start, stop in batches]
        runs = plan.runs(*batches[0]) if batches else []
        ahead: Background[list[bytes]] | None = None
        try:
            for index, (start, stop) in enumerate(batches):
                fetched = plan.fetch(runs) if ahead is None else ahead.result()
                current, ahead = runs, None
                if index + 1 < len(batches):
                    runs = plan.runs(*batches[index + 1])
                    if read_ahead and runs and totals[index] + totals[index + 1] <= batch_bytes:
                        ahead = Background(functools.partial(plan.fetch, runs), "trackpoint-read")
                yield plan.finish(start, stop, current, fetched)
        finally:
            if ahead is not None:  # the caller stopped early: no thread is left reading
                ahead.join()

    def _fast_rows(self, columns: EntryColumns, keys: Sequence[str]) -> np.ndarray:
        """Rows that are plain, numeric, small, valid and inside their shard file (see _ReadPlan)."""
        if self.big_endian:
            return np.zeros(len(columns.plain), bool)
        dtype = np.clip(columns.dtype, 0, len(_ITEMSIZES) - 1)
        itemsize = _ITEMSIZES[dtype]
        in_rank = np.arange(columns.dims.shape[1])[None, :] < columns.ndim[:, None]
        elements = np.prod(np.where(in_rank, columns.dims, 1).astype(np.float64), axis=1)  # exact below 2**53
        fast = (columns.plain & (itemsize > 0) & (columns.dtype == dtype) & (columns.ndim <= _MAX_RANK)
                & ~(in_rank & (columns.dims < 0)).any(axis=1) & (elements * itemsize == columns.size)
                & (columns.size < _PARALLEL_READ_BYTES) & (columns.offset >= 0)
                & (columns.shard_id >= 0) & (columns.shard_id < self.num_shards))
        for shard_id in distinct(columns.shard_id[fast]):
            rows = fast & (columns.shard_id == shard_id)
            file_size = self._shard_fd(shard_id, keys[int(np.argmax(rows))])[1]
            fast[rows] = columns.offset[rows] + columns.size[rows] <= file_size
        return fast

    def _plan_runs(self, shard_id: int, rows: np.ndarray, plan: _ReadPlan) -> list[_Run]:
        """Group the small tensors ``rows`` of one shard into as few reads as possible.

        Tensors are taken in file order and grouped into runs: neighbours less than
        ``_RUN_GAP`` apart, spanning at most ``_RUN_BYTES``. Each run is one read.
        """
        columns = plan.columns
        order = rows[np.argsort(columns.offset[rows], kind="stable")]
        starts = columns.offset[order]
        ends = starts + columns.size[order]
        reach = np.maximum.accumulate(ends)  # the end of the run so far, whatever the order of sizes
        bounds = [0, *(np.flatnonzero(starts[1:] - reach[:-1] > _RUN_GAP) + 1).tolist(), len(order)]
        spans: list[tuple[int, int]] = []
        for a, b in itertools.pairwise(bounds):
            if reach[b - 1] - starts[a] <= _RUN_BYTES:
                spans.append((a, b))
                continue
            for i in range(a, b):  # too long for one read: split where it grows past _RUN_BYTES
                if i == a or reach[i] - starts[spans[-1][0]] > _RUN_BYTES:
                    spans.append((i, i + 1))
                else:
                    spans[-1] = (spans[-1][0], i + 1)
        fd = self._shard_fd(shard_id, plan.keys[int(order[0])])[0]
        runs = []
        for a, b in spans:
            first = int(starts[a])
            runs.append(_Run(shard_id, fd, first, int(reach[b - 1]) - first, order[a:b], starts[a:b] - first,
                             ends[a:b] - first))
        return runs

    def _read_run(self, run: _Run, plan: _ReadPlan) -> bytes:
        """A run's bytes, unchecked (see :meth:`_hand_out_run`); any thread may call this."""
        # Immutable bytes, so the arrays handed out are read-only views from the start.
        buf = os.pread(run.fd, run.length, run.first)
        while len(buf) < run.length:  # a short read: only a file shrinking under us ends this
            more = os.pread(run.fd, run.length - len(buf), run.first + len(buf))
            if not more:
                path = naming.data_filename(self.prefix, run.shard_id, self.num_shards)
                key = plan.keys[int(run.rows[0])]
                raise self._damaged(path, key, f"{path}: unexpected end of file reading key {readable_key(key)!r}")
            buf += more
        return buf

    def _hand_out_run(self, run: _Run, buf: bytes, plan: _ReadPlan, results: list[Any], base: int) -> None:
        """Verify each tensor of a run against its crc and place its array in ``results``."""
        ndarray, crcs, dtypes = np.ndarray, plan.crcs, plan.dtypes
        view = memoryview(buf)
        run_rows = run.rows
        row_list, los = run_rows.tolist(), run.starts.tolist()
        for row, lo, hi, crc in zip(row_list, los, run.ends.tolist(), crcs[run_rows].tolist()):
            if raw_crc32c(view[lo:hi]) != crc:
                path = naming.data_filename(self.prefix, run.shard_id, self.num_shards)
                raise self._damaged(path, plan.keys[row],
                    f"{path}: checksum mismatch for key {readable_key(plan.keys[row])!r}; the data file is damaged. "
                    "Restore from another checkpoint or re-save"
                )
        head = row_list[0]
        count = len(row_list)
        if count > 1 and plan.uniform(run_rows) and (run.starts[1:] == run.ends[:-1]).all():
            # Back to back and alike (a model's many same-shaped variables): one array over
            # the run, whose rows are the tensors, costs less than one array per tensor.
            arrays = list(ndarray((count, *plan.shape(head)), dtypes[head], buf, los[0]))
        else:
            shapes = plan.shapes
            arrays = [ndarray(shapes[row], dtypes[row], buf, lo) for row, lo in zip(row_list, los)]
        for row, array in zip(row_list, arrays):
            results[row - base] = array

    def _check_out(self, entry: Entry, dtype: DType, out: np.ndarray) -> None:
        if dtype.is_string or out.dtype != dtype.numpy or out.shape != entry.shape:
            raise InvalidArgumentError(
                f"{self.prefix}: key {readable_key(entry.key)!r} is {dtype.name}{list(entry.shape)}; cannot read it "
                f"into an array of {out.dtype}{list(out.shape)}"
            )
        if not (out.flags.c_contiguous and out.flags.writeable):
            raise InvalidArgumentError(
                f"{readable_key(entry.key)!r}: the destination array must be C-contiguous and writable"
            )

    def _read_plain(self, entry: Entry, dtype: DType, out: np.ndarray | None) -> np.ndarray | bytes:
        if dtype.is_string:
            if self.big_endian:
                raise InvalidArgumentError(
                    f"{self.prefix}: key {readable_key(entry.key)!r}: string tensors of big-endian checkpoints are not "
                    "supported"
                )
            if math.prod(entry.shape) > entry.size:
                raise DataLossError(
                    f"{self.index_path}: key {readable_key(entry.key)!r} declares {math.prod(entry.shape)} strings in "
                    f"{entry.size} bytes"
                )
            path = self._data_path(entry)
            stored = self._read_bytes(entry, verify=False)
            what = f"{path}: key {readable_key(entry.key)!r}"
            try:
                return decode_strings(stored, entry.shape, unmask(entry.crc32c), what)
            except DataLossError as exc:
                raise self._damaged(path, entry.key, str(exc)) from exc
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
        for proto in entry.slices:
            extents = slices.extents_from_proto(proto)
            try:
                bounds = slices.resolve(extents, full_shape, f"{self.index_path}: key {readable_key(entry.key)!r}")
            except InvalidArgumentError as exc:
                raise DataLossError(str(exc)) from exc
            boxes.append((extents, bounds))
            covered += slices.volume(bounds)
        if covered != total:
            raise DataLossError(
                f"{self.index_path}: slices of key {readable_key(entry.key)!r} cover {covered} of its {total} elements "
                "(overlapping or incomplete); the checkpoint is damaged or a shard's index was lost"
            )
        _check_disjoint([b for _, b in boxes], entry.key, self.index_path)
        # Slices are disjoint and their volumes add up to the whole, so they cover it exactly.
        # Every part is validated against its file before the whole tensor is allocated.
        parts = []
        for extents, bounds in boxes:
            part_key = slices.encode_slice_key(entry.key, extents)
            if part_key not in self._rows:
                raise DataLossError(
                    f"{self.index_path}: slice {list(bounds)} of key {readable_key(entry.key)!r} has no entry"
                )
            part = self.entry(part_key)
            expected = tuple(stop - start for start, stop in bounds)
            if part.dtype_enum != entry.dtype_enum or part.shape != expected or part.is_sliced:
                raise DataLossError(
                    f"{self.index_path}: slice {list(bounds)} of key {readable_key(entry.key)!r} is stored as "
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


class _ReadPlan:
    """Keys to read, decoded and checked all at once; see :meth:`BundleReader.read_batches`.

    Plain numeric entries are decoded as numpy columns (:mod:`.entry_columns`) and checked
    together; "fast" rows are the small ones found valid and inside their file. Every other
    row (strings, slices, large tensors, big-endian files, anything unusual or damaged) is
    decoded and checked one by one here, which raises the precise error, and is read by
    :meth:`BundleReader.read` when its batch comes.
    """

    def __init__(self, reader: BundleReader, keys: Sequence[str]) -> None:
        self.reader = reader
        self.keys = keys
        get = reader._rows.get
        rows = [get(key.encode("utf-8", "surrogateescape")) for key in keys]
        if None in rows:
            reader.entry(keys[rows.index(None)])  # raises NotFoundError
        data, starts, ends = reader._entry_spans()
        index = np.array(rows, np.int64)
        columns = decode_spans(data, starts[index], ends[index])
        self.columns = columns
        fast = self.fast = reader._fast_rows(columns, keys)
        # What each row counts for when batching: its size; for a sliced tensor, a whole batch.
        self.batch_sizes = columns.size.copy()
        self.crcs = _unmask_all(columns.crc32c)
        self.dtypes = _NUMPY_TABLE[np.clip(columns.dtype, 0, len(_NUMPY_TABLE) - 1)].tolist()
        for row in np.flatnonzero(~fast).tolist():
            entry = reader.entry(keys[row])
            reader._check_numeric(entry)
            if not (entry.is_sliced or entry.dtype.is_string):
                reader._check_span(entry)
            self.batch_sizes[row] = entry.size if not entry.is_sliced else 1 << 62

    @functools.cached_property
    def shapes(self) -> list[tuple[int, ...]]:
        """Each row's shape. Only runs of unlike tensors need them all (see :meth:`shape`)."""
        return self.columns.shapes()

    def shape(self, row: int) -> tuple[int, ...]:
        columns = self.columns
        return tuple(columns.dims[row, : columns.ndim[row]].tolist())

    def uniform(self, rows: np.ndarray) -> bool:
        """Whether these rows are tensors of one dtype and one shape, of rank 1 or more."""
        columns = self.columns
        head = rows[0]
        return bool(columns.ndim[head] > 0 and (columns.dtype[rows] == columns.dtype[head]).all()
                    and (columns.ndim[rows] == columns.ndim[head]).all()
                    and (columns.dims[rows] == columns.dims[head]).all())

    def batches(self, batch_bytes: int) -> Iterator[tuple[int, int]]:
        """``(start, stop)`` row ranges of at most ``batch_bytes`` (or one larger row)."""
        # Greedy, as a loop adding rows while they fit would do, one batch per step: a row
        # larger than a batch fills one whatever its size, so sizes are capped (and the
        # prefix sums cannot overflow).
        sizes = np.clip(self.batch_sizes, 0, batch_bytes + 1)
        ends = np.concatenate(([0], np.cumsum(sizes)))
        start, count = 0, len(sizes)
        while start < count:
            stop = max(start + 1, int(np.searchsorted(ends, ends[start] + batch_bytes, "right")) - 1)
            yield start, stop
            start = stop

    def runs(self, start: int, stop: int) -> list[_Run]:
        """The reads that fetch the small tensors of rows ``start:stop``."""
        rows = np.flatnonzero(self.fast[start:stop]) + start
        shards = self.columns.shard_id[rows]
        return [run for shard_id in distinct(shards)
                for run in self.reader._plan_runs(shard_id, rows[shards == shard_id], self)]

    def fetch(self, runs: list[_Run]) -> list[bytes]:
        """The bytes of ``runs``, unchecked: nothing but file reads, so a helper thread may do it."""
        return [self.reader._read_run(run, self) for run in runs]

    def finish(self, start: int, stop: int, runs: list[_Run], fetched: list[bytes]) -> list[Any]:
        """The values of rows ``start:stop``, in order: the fetched ones checked, the others read now."""
        reader = self.reader
        results: list[Any] = [None] * (stop - start)
        for row in (np.flatnonzero(~self.fast[start:stop]) + start).tolist():
            results[row - start] = reader.read(self.keys[row])
        for run, buf in zip(runs, fetched):
            reader._hand_out_run(run, buf, self, results, start)
        return results


@dataclass(frozen=True)
class _Run:
    """One read of neighbouring small tensors: where it lies, and each tensor's row and place in it."""

    shard_id: int
    fd: int
    first: int
    length: int
    rows: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def _unmask_all(masked: np.ndarray) -> np.ndarray:
    """:func:`unmask` over a column of stored checksums."""
    rot = (masked.astype(np.uint64) - np.uint64(MASK_DELTA)) & np.uint64(0xFFFFFFFF)
    return ((rot >> np.uint64(17)) | (rot << np.uint64(15))) & np.uint64(0xFFFFFFFF)


_NUMPY_TABLE = np.full(max(DTYPES) + 1, None, object)  # DataType enum -> numpy dtype, None if not numeric
_ITEMSIZES = np.zeros(max(DTYPES) + 1, np.int64)  # 0: not a numeric dtype read here
for _enum, _dtype in DTYPES.items():
    if not _dtype.is_string:
        _NUMPY_TABLE[_enum] = _dtype.numpy
        _ITEMSIZES[_enum] = _dtype.numpy.itemsize


def _check_disjoint(boxes: list[tuple[tuple[int, int], ...]], key: str, path: str) -> None:
    """Raise if any two slices overlap (sweep along the first dimension)."""
    if not boxes or not boxes[0]:
        if len(boxes) > 1:
            raise DataLossError(f"{path}: scalar key {readable_key(key)!r} has {len(boxes)} slices")
        return
    ordered = sorted(boxes)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if b[0][0] >= a[0][1]:
                break
            if all(bs < ae and as_ < be for (as_, ae), (bs, be) in zip(a, b)):
                raise DataLossError(f"{path}: slices {list(a)} and {list(b)} of key {readable_key(key)!r} overlap")
