"""Reading a bundle lazily: the index is parsed on open, each tensor read on demand.

Nothing in the files is trusted. Before any allocation, every entry passes the rules of
:mod:`.entry_rules` (dtype known, dims non-negative, ``size`` equal to the element count
times the element size, shard id below the shard count, ``offset + size`` inside the
file); slices must lie inside their tensor, disjoint and complete; and every tensor's
crc32c is verified against the bytes read. Many tensors at once are read by
:mod:`.batch_read`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
from google.protobuf.message import DecodeError

from trackpoint._format import batch_read, entry_rules, slices, sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.crc import crc32c, crc32c_combine, unmask
from trackpoint._format.dtypes import DType, enum_name
from trackpoint._format.entries import Entry, entries_from_columns, parse_entry
from trackpoint._format.entry_columns import EntryColumns, decode_spans, padded
from trackpoint._format.in_place import InPlace
from trackpoint._format.keys import decode_key, lookup_key, lookup_keys
from trackpoint._format.read_tuning import DEFAULT_TUNING, ReadTuning
from trackpoint._format.slices import readable_key
from trackpoint._format.tensors import decode_strings, numeric_bytes_view
from trackpoint._format.threads import parallel_map
from trackpoint._storage import files, naming
from trackpoint._storage.readahead import start_readahead
from trackpoint._storage.shard_files import ShardFiles, identity
from trackpoint._storage.storage import storage_for
from trackpoint.errors import CheckpointError, DataLossError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = ["BundleReader", "Entry", "check_disjoint"]


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

    def __init__(
        self,
        prefix: str,
        damaged_blocks: list[str] | None = None,
        tuning: ReadTuning = DEFAULT_TUNING,
        index: tuple[bytes, os.stat_result] | None = None,
    ) -> None:
        """Open ``prefix.index``; with ``damaged_blocks``, skip and record damaged index blocks.

        ``tuning`` sets how data files are read (see :class:`ReadTuning`). ``index``: at a URL,
        the index object's bytes and stat that the caller has just fetched
        (:func:`~trackpoint._format.state_file.resolve_index`).
        """
        # An overwrite of the prefix cut short inside TF's window is read from its kept
        # previous version (see trackpoint._storage.previous).
        self.prefix = storage_for(prefix).readable_prefix(prefix)
        self.index_path = naming.index_filename(self.prefix)
        self.tuning = tuning
        try:
            if index is not None and self.prefix == prefix:
                data, stat = index
            else:
                data, stat = files.read_regular(self.index_path, "checkpoint index", naming.MAX_INDEX_BYTES)
        except NotFoundError as exc:
            raise NotFoundError(
                f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for {prefix}: "
                f"{self.index_path} does not exist. Pass the checkpoint prefix (e.g. 'dir/ckpt-1', without "
                "'.index'), or a directory holding a 'checkpoint' state file.",
                path=self.index_path,
            ) from exc
        try:
            table = sstable.read_table_spans(data, self.index_path, damaged_blocks)
        except DataLossError as exc:
            exc.path = exc.path or self.index_path  # the table's messages name the block, not only the file
            raise
        if not table.keys or table.keys[0] != b"":
            raise DataLossError(
                f"{self.index_path}: no bundle header entry; not a TensorFlow checkpoint index", path=self.index_path
            )
        header = pb.BundleHeaderProto()
        try:
            header.ParseFromString(table.value(0))
        except DecodeError as exc:
            raise DataLossError(f"{self.index_path}: malformed bundle header: {exc}", path=self.index_path) from exc
        if header.version.min_consumer > 1 or 1 in header.version.bad_consumers:
            raise InvalidArgumentError(
                f"{self.index_path}: written by a newer format (min_consumer={header.version.min_consumer}); "
                "upgrade trackpoint"
            )
        if header.num_shards < 1:
            raise DataLossError(
                f"{self.index_path}: header declares {header.num_shards} data shards", path=self.index_path
            )
        count = len(table.keys) - 1
        if count < header.num_shards and header.num_shards > 1:
            # every shard holds at least one entry; this bounds what a hostile header can claim
            raise DataLossError(
                f"{self.index_path}: {header.num_shards} shards declared for {count} entries", path=self.index_path
            )
        self.num_shards = header.num_shards
        self.big_endian = header.endianness == pb.BundleHeaderProto.BIG
        self._table = table
        self._rows: dict[bytes, int] = dict(zip(table.keys[1:], range(1, count + 1)))  # key -> row of the table
        self._spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # for entry_columns, made on demand
        self._files = ShardFiles(self.prefix, self.index_path, identity(stat), self.num_shards, readable_key)

    # -- index --------------------------------------------------------------------------

    def raw_keys(self) -> Iterator[bytes]:
        """All non-header keys in index order, slice entries included."""
        return iter(self._rows)

    @property
    def entry_count(self) -> int:
        """How many entries the index holds besides its header (slices included)."""
        return len(self._rows)

    def __contains__(self, key: str | bytes) -> bool:
        return lookup_key(key) in self._rows

    def entry(self, key: str | bytes) -> Entry:
        """The entry for ``key``, decoded by protobuf, with the rules of :attr:`Stage.ENTRY` checked.

        Raises:
            NotFoundError: No such key.
            DataLossError: The entry is malformed.
        """
        # Not cached: a restore decodes each entry once, and keeping tens of thousands of
        # them alive with the reader would only feed the garbage collector.
        name = key if isinstance(key, str) else decode_key(key)
        row = self._rows.get(lookup_key(key))
        if row is None:
            raise NotFoundError(
                f"Key {readable_key(name)} not found in checkpoint {self.prefix}", path=self.prefix, key=name
            )
        entry = parse_entry(name, self._table.value(row), self.index_path)
        entry_rules.check(entry, self, entry_rules.ENTRY_RULES)
        return entry

    def entries(self, damaged: dict[bytes, CheckpointError] | None = None) -> list[Entry]:
        """Every entry in index order, decoded all at once; the rules of :attr:`Stage.ENTRY` checked.

        Args:
            damaged: If given, a malformed entry is recorded here under its stored key and
                left out, instead of raising.

        Raises:
            DataLossError: An entry is malformed (without ``damaged``).
        """
        raw_keys = list(self._rows)
        names = [decode_key(raw) for raw in raw_keys]
        data, starts, ends = self._entry_spans()
        decoded = entries_from_columns(names, decode_spans(data, starts[1:], ends[1:]))
        result = []
        for row, (raw, name, entry) in enumerate(zip(raw_keys, names, decoded), 1):
            try:
                if entry is None:  # unusual or damaged: protobuf decodes it, or says what is wrong
                    entry = parse_entry(name, self._table.value(row), self.index_path)
                entry_rules.check(entry, self, entry_rules.ENTRY_RULES)
            except CheckpointError as exc:
                if damaged is None:
                    raise
                damaged[raw] = exc
                continue
            result.append(entry)
        return result

    def columns(self, keys: Sequence[str]) -> EntryColumns:
        """The entries of ``keys`` as numpy columns (see :mod:`.entry_columns`); nothing checked yet.

        Raises:
            NotFoundError: A key is not in the index.
        """
        rows = list(map(self._rows.get, lookup_keys(keys)))
        if None in rows:
            self.entry(keys[rows.index(None)])  # raises NotFoundError
        data, starts, ends = self._entry_spans()
        index = np.array(rows, np.int64)
        return decode_spans(data, starts[index], ends[index])

    def _entry_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The index's values as :func:`decode_spans` takes them: data, starts, ends by row."""
        if self._spans is None:
            table = self._table
            self._spans = (padded(table.data), np.array(table.starts, np.int64), np.array(table.ends, np.int64))
        return self._spans

    # -- data files ---------------------------------------------------------------------

    def data_path(self, shard_id: int) -> str:
        return self._files.path(shard_id)

    def shard_fd(self, shard_id: int, key: str, spans: Sequence[tuple[int, int]] | None = None) -> tuple[int, int]:
        """``(descriptor, size)`` of a data shard, opened on first use, with the byte ranges
        ``spans`` about to be read in place (None: all of it; see :meth:`ShardFiles.open`)."""
        return self._files.open(shard_id, key, spans)

    def entry_fd(self, entry: Entry) -> int:
        """The descriptor to read ``entry``'s stored bytes from (they are there: see :meth:`shard_fd`)."""
        return self._files.open(entry.shard_id, entry.key, ((entry.offset, entry.offset + entry.size),))[0]

    def expect_most(self) -> None:
        """Say that most stored bytes will be read soon (a restore): at a URL, data objects of
        at most ``tuning.prefetch_bytes`` in all start downloading whole while the caller works
        on the index and the object graph. Locally, nothing."""
        self._files.prefetch(self.tuning.prefetch_bytes)

    def expect(self, keys: Sequence[str], shard_ids: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Say which stored bytes will be read (rows of ``keys``, checked already): at a URL
        they are fetched now, neighbours together, instead of one request per tensor."""
        files = self._files
        if not files.local_copies or all(files.held_whole(i) for i in range(files.num_shards)):
            return  # local, or downloaded already: no spans to work out
        for shard_id in np.unique(shard_ids).tolist():
            if files.held_whole(int(shard_id)):
                continue
            rows = np.flatnonzero((shard_ids == shard_id) & (sizes > 0))
            if len(rows):
                starts = offsets[rows]
                spans = list(zip(starts.tolist(), (starts + sizes[rows]).tolist()))
                self._files.open(int(shard_id), keys[int(rows[0])], spans)

    def expect_entries(self, entries: Sequence[Entry]) -> None:
        """:meth:`expect` for entries about to be read one by one (a tool's, or every entry for a
        verify); one whose shard cannot be opened is left for its read to report."""
        if not self._files.local_copies:
            return
        plain = [e for e in entries if not e.is_sliced and 0 <= e.shard_id < self._files.num_shards]
        with contextlib.suppress(CheckpointError):
            self.expect(
                [e.key for e in plain],
                np.array([e.shard_id for e in plain], np.int64),
                np.array([e.offset for e in plain], np.int64),
                np.array([max(e.size, 0) for e in plain], np.int64),
            )

    def file_size(self, shard_id: int, key: str) -> int:
        """The size of a data shard, as first opened (at a URL, without fetching any of it)."""
        return self._files.open(shard_id, key, ())[1]

    def damaged(self, path: str, key: str, message: str) -> CheckpointError:
        """The error for bytes of ``path`` that disagree with the index (see :meth:`ShardFiles.damaged`)."""
        return self._files.damaged(path, key, message)

    def checksum_mismatch(self, shard_id: int, key: str) -> CheckpointError:
        """The error for a tensor whose bytes fail their checksum."""
        path = self.data_path(shard_id)
        return self.damaged(
            path,
            key,
            f"{path}: checksum mismatch for key {readable_key(key)!r}; the data file is "
            "damaged. Restore from another checkpoint or re-save",
        )

    def ended_early(self, shard_id: int, key: str) -> CheckpointError:
        """The error for a data file that ends before a tensor the index places in it."""
        path = self.data_path(shard_id)
        return self.damaged(path, key, f"{path}: unexpected end of file reading key {readable_key(key)!r}")

    def release_files(self) -> None:
        """Close the data files now; a later read reopens them, and raises if they changed meanwhile.

        A restore calls this when it returns, so that no file stays open for as long as its
        status lives or values wait for objects not created yet (restore-on-create). When
        such a value is needed, its file is reopened for that read and closed again; if the
        checkpoint was replaced, modified or deleted in between, the read raises
        :class:`~trackpoint.errors.DataLossError` (or ``NotFoundError``) naming the file and
        key instead of returning other values. Unlike :meth:`close`, the reader stays usable.
        """
        self._files.release()

    # -- reading ------------------------------------------------------------------------

    def prefetch(self, entry: Entry) -> None:
        """Let the disk start reading ``entry``'s stored bytes, for a read of it soon (see
        :mod:`trackpoint._storage.readahead`): for a tool that reads one large tensor while it writes the last.

        Small tensors (see :data:`trackpoint._storage.readahead.MIN_BYTES`) and sliced ones are left to the
        kernel's own readahead, as is anything the index gets wrong: the read reports that.
        """
        if entry.is_sliced:
            return
        try:
            fd = self.entry_fd(entry)
        except CheckpointError:
            return
        start_readahead(fd, entry.offset, entry.size)

    def checked(self, entry: Entry) -> DType:
        """Check ``entry`` against the rules for reading its value (and its file, if unsliced); its dtype.

        Called before anything is allocated for the entry, so a hostile size or shape can
        never cost more memory than the file itself holds.
        """
        if entry.slices:
            entry_rules.check(entry, self, entry_rules.VALUE_RULES)
        else:
            entry_rules.check(entry, self, entry_rules.READ_RULES)
        return entry.dtype  # type: ignore[return-value]  # the VALUE rules refuse an unreadable dtype

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
        return self.read_checked(entry, self.checked(entry), out)

    def read_checked(self, entry: Entry, dtype: DType, out: np.ndarray | None = None) -> np.ndarray | bytes:
        """:meth:`read` of an entry that already passed :meth:`checked` (which gave ``dtype``)."""
        if out is not None:
            self._check_out(entry, dtype, out)
        if entry.is_sliced:
            return self._read_sliced(entry, dtype, out)
        return self._read_plain(entry, dtype, out)

    def read_batches(
        self, keys: Sequence[str], batch_bytes: int, in_place: InPlace | None = None
    ) -> Iterator[list[np.ndarray | bytes]]:
        """Read tensors, checksums verified, yielding their values in order batch by batch.

        A caller that stores the values as they come needs no more memory than ``batch_bytes``
        (or one larger tensor): at most that much is read and not yet consumed at any time.
        Every entry is decoded and checked against the files before the first batch is read.
        See :mod:`.batch_read` for how. With ``in_place``, large tensors may be verified
        instead, to be copied into existing arrays later (see :mod:`.in_place`).
        """
        plan = batch_read.ReadPlan(self, keys, in_place)
        yield from plan.values(plan.loader(batch_bytes))

    def read_one(self, key: str, in_place: InPlace) -> np.ndarray | bytes:
        """:meth:`read` of one tensor, or, when ``in_place`` claims it, its destination once verified."""
        entry = self.entry(key)
        dtype = self.checked(entry)
        if entry.size >= self.tuning.in_place_bytes:
            outs = in_place.claim(self, {0: entry})
            if outs:
                in_place.verify()
                return outs[0]
        return self.read_checked(entry, dtype)

    def _read_bytes(self, entry: Entry, dest: memoryview | None = None, verify: bool = True) -> memoryview:
        """Read the stored bytes of an entry that passed :meth:`checked` (into ``dest`` if given) and verify the crc.

        String tensors pass ``verify=False``: their crc is not over the stored bytes but over
        the lengths as fixed-width integers, so :func:`decode_strings` checks it.
        """
        fd = self.entry_fd(entry)
        size = entry.size
        buf = dest if dest is not None else memoryview(bytearray(size))
        if verify and size >= 2 * self.tuning.chunk_bytes:
            crc = self._read_parallel(fd, entry, buf)
        else:
            self._pread(fd, entry, buf, 0, size)
            crc = crc32c(buf) if verify else 0
        if verify and crc != unmask(entry.crc32c):
            raise self.checksum_mismatch(entry.shard_id, entry.key)
        return buf

    def _pread(self, fd: int, entry: Entry, buf: memoryview, start: int, stop: int) -> None:
        done = start
        while done < stop:
            n = os.preadv(fd, [buf[done:stop]], entry.offset + done)
            if n <= 0:
                raise self.ended_early(entry.shard_id, entry.key)
            done += n

    def _read_parallel(self, fd: int, entry: Entry, buf: memoryview) -> int:
        """Read a large tensor with several threads, each checksumming its own part; return the crc.

        File reads and crc32c both release the GIL, so the parts proceed at once on several
        cores; each thread works in cache-sized chunks, checksumming what it has just read.
        The parts' crcs are then combined. No memory is used beyond the destination.
        """
        size, chunk_bytes = entry.size, self.tuning.chunk_bytes
        parts = min(self.tuning.read_threads, max(1, size // chunk_bytes))
        step = -(-size // parts)

        def read_part(start: int) -> int:
            stop = min(start + step, size)
            crc = 0
            for chunk in range(start, stop, chunk_bytes):
                end = min(chunk + chunk_bytes, stop)
                self._pread(fd, entry, buf, chunk, end)
                crc = crc32c(buf[chunk:end], crc)
            return crc

        starts = list(range(0, size, step))
        crcs = parallel_map(read_part, starts, len(starts))
        crc = crcs[0]
        for start, part_crc in zip(starts[1:], crcs[1:]):
            crc = crc32c_combine(crc, part_crc, min(start + step, size) - start)
        return crc

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
            path = self.data_path(entry.shard_id)
            stored = self._read_bytes(entry, verify=False)
            what = f"{path}: key {readable_key(entry.key)!r}"
            try:
                return decode_strings(stored, entry.shape, unmask(entry.crc32c), what)
            except DataLossError as exc:
                raise self.damaged(path, entry.key, str(exc)) from exc
        array = out if out is not None else np.empty(entry.shape, dtype=dtype.numpy)
        self._read_bytes(entry, numeric_bytes_view(array) if array.size else memoryview(b""))
        if self.big_endian:
            array.byteswap(inplace=True)
        return array

    def _read_sliced(self, entry: Entry, dtype: DType, out: np.ndarray | None) -> np.ndarray:
        result = out if out is not None else np.empty(entry.shape, dtype=dtype.numpy)
        for part, bounds in self._slice_parts(entry, dtype):
            result[tuple(slice(start, stop) for start, stop in bounds)] = self._read_plain(part, dtype, None)
        return result

    def _slice_parts(self, entry: Entry, dtype: DType) -> list[tuple[Entry, tuple[tuple[int, int], ...]]]:
        """The entry of each stored slice of a sliced ``entry``, with its bounds, all checked.

        The slices are disjoint and their volumes add up to the whole, so they cover it
        exactly; every part is validated against its file before anything is allocated.
        """
        full_shape = entry.shape
        total = math.prod(full_shape)
        boxes = []
        covered = 0
        for proto in entry.slices:
            extents = slices.extents_from_proto(proto)
            try:
                bounds = slices.resolve(extents, full_shape, f"{self.index_path}: key {readable_key(entry.key)!r}")
            except InvalidArgumentError as exc:
                raise DataLossError(str(exc), path=self.index_path, key=entry.key) from exc
            boxes.append((extents, bounds))
            covered += slices.volume(bounds)
        if covered != total:
            raise DataLossError(
                f"{self.index_path}: slices of key {readable_key(entry.key)!r} cover {covered} of its {total} elements "
                "(overlapping or incomplete); the checkpoint is damaged or a shard's index was lost",
                path=self.index_path,
                key=entry.key,
            )
        check_disjoint([b for _, b in boxes], entry.key, self.index_path)
        parts = []
        for extents, bounds in boxes:
            part_key = slices.encode_slice_key(entry.key, extents)
            if part_key not in self._rows:
                raise DataLossError(
                    f"{self.index_path}: slice {list(bounds)} of key {readable_key(entry.key)!r} has no entry",
                    path=self.index_path,
                    key=entry.key,
                )
            part = self.entry(part_key)
            expected = tuple(stop - start for start, stop in bounds)
            if part.dtype_enum != entry.dtype_enum or part.shape != expected or part.is_sliced:
                raise DataLossError(
                    f"{self.index_path}: slice {list(bounds)} of key {readable_key(entry.key)!r} is stored as "
                    f"{enum_name(part.dtype_enum)}{list(part.shape)}, expected {dtype.enum_name}{list(expected)}",
                    path=self.index_path,
                    key=entry.key,
                )
            self.checked(part)
            parts.append((part, bounds))
        return parts

    def read_region(
        self, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None = None
    ) -> np.ndarray:
        """Read the part ``bounds`` (``(start, stop)`` per dimension) of one tensor, checksums verified.

        Only the stored slices that overlap the region are read, each whole (a checksum covers
        a stored slice, not part of it); a tensor stored whole is one such slice. A process
        holding one shard of a tensor saved by several (or by one) reads this way.

        Raises:
            InvalidArgumentError: The region does not lie inside the tensor, or the tensor's
                shape is not ``full_shape`` (when given).
        """
        entry, dtype, bounds = self._region(key, bounds, full_shape)
        if not entry.is_sliced:
            whole = self.read_checked(entry, dtype)
            # The trailing Ellipsis keeps a 0-d tensor a 0-d array (an empty index would give a
            # scalar, and np.ascontiguousarray makes anything at least 1-d).
            region = np.asarray(whole)[tuple(slice(a, b) for a, b in bounds) + (Ellipsis,)]
            return region if region.flags.c_contiguous else np.copy(region, order="C")
        parts = self._slice_parts(entry, dtype)
        exact = _slice_of(parts, bounds)
        if exact is not None:  # one stored slice is the region: no assembly
            return np.asarray(self._read_plain(exact, dtype, None))
        result = np.empty(tuple(stop - start for start, stop in bounds), dtype=dtype.numpy)
        for part, part_bounds in parts:
            overlap = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(bounds, part_bounds)]
            if any(start >= stop for start, stop in overlap):
                continue
            data = self._read_plain(part, dtype, None)
            result[tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(overlap, bounds))] = np.asarray(data)[
                tuple(slice(lo - c, hi - c) for (lo, hi), (c, _) in zip(overlap, part_bounds))
            ]
        return result

    def region_entry(
        self, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None = None
    ) -> Entry | None:
        """The checked plain entry whose bytes are exactly the region ``bounds`` of a tensor (the
        tensor stored whole, or one stored slice), or None when the region takes several or part
        of one. Such a region can be read in place like a whole tensor (see :mod:`.in_place`).

        Raises:
            InvalidArgumentError: As :meth:`read_region`.
        """
        entry, dtype, bounds = self._region(key, bounds, full_shape)
        if not entry.is_sliced:
            return entry if all(stop - start == dim for (start, stop), dim in zip(bounds, entry.shape)) else None
        return _slice_of(self._slice_parts(entry, dtype), bounds)

    def _region(
        self, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None
    ) -> tuple[Entry, DType, tuple[tuple[int, int], ...]]:
        """The checked entry of ``key``, its dtype and ``bounds`` as ints, once the region lies in it."""
        entry = self.entry(key)
        dtype = self.checked(entry)
        bounds = tuple((int(start), int(stop)) for start, stop in bounds)
        if full_shape is not None and tuple(full_shape) != tuple(entry.shape):
            raise InvalidArgumentError(
                f"{self.prefix}: key {readable_key(entry.key)!r} is {dtype.name}{list(entry.shape)}, not of the full "
                f"shape {list(full_shape)} a block of it is to be read for",
                path=self.prefix,
                key=readable_key(entry.key),
            )
        if len(bounds) != len(entry.shape) or any(
            not 0 <= start <= stop <= dim for (start, stop), dim in zip(bounds, entry.shape)
        ):
            raise InvalidArgumentError(
                f"{self.prefix}: key {readable_key(entry.key)!r} is {dtype.name}{list(entry.shape)}; the region "
                f"{[list(b) for b in bounds]} does not lie inside it",
                path=self.prefix,
                key=readable_key(entry.key),
            )
        return entry, dtype, bounds

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the data files; later reads raise."""
        files = getattr(self, "_files", None)  # absent when the constructor raised
        if files is not None:
            files.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Half-built, or at interpreter exit: nothing left to close.
        with contextlib.suppress(Exception):
            self.close()


def check_disjoint(boxes: list[tuple[tuple[int, int], ...]], key: str, path: str) -> None:
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


def _slice_of(
    parts: Sequence[tuple[Entry, tuple[tuple[int, int], ...]]], bounds: tuple[tuple[int, int], ...]
) -> Entry | None:
    """The stored slice among ``parts`` whose bounds are exactly ``bounds``, if one is."""
    return next((part for part, part_bounds in parts if part_bounds == bounds), None)
