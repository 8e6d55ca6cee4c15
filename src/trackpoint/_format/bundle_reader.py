"""Reading a bundle lazily: the index is parsed on open, each tensor read on demand.

Nothing in the files is trusted. Before any allocation, every entry passes the rules of
:mod:`.entry_rules` (dtype known, dims non-negative, ``size`` equal to the element count
times the element size, shard id below the shard count, ``offset + size`` inside the
file); slices must lie inside their tensor, disjoint and complete; and every tensor's
crc32c is verified against the bytes read.

The reader's jobs beyond the index live beside it: opening the index file
(:mod:`.bundle_index`), one tensor's stored bytes (:mod:`.chunked_read`, over :mod:`.pread`),
tensors stored in slices and regions of tensors (:mod:`.sliced_read`), many tensors at once
(:mod:`.batch_read`), reads into existing arrays (:mod:`.in_place`), and hints of what will be
read soon (:mod:`.read_hints`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from trackpoint._format import batch_read, entry_rules, read_hints, sliced_read
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.bundle_index import read_index
from trackpoint._format.chunked_read import read_stored
from trackpoint._format.crc import unmask
from trackpoint._format.dtypes import DType
from trackpoint._format.entries import Entry, entries_from_columns, parse_entry
from trackpoint._format.entry_columns import EntryColumns, decode_spans, padded
from trackpoint._format.in_place import InPlace
from trackpoint._format.keys import decode_key, lookup_key, lookup_keys
from trackpoint._format.read_tuning import DEFAULT_TUNING, ReadTuning
from trackpoint._format.slices import readable_key
from trackpoint._format.tensors import decode_strings, numeric_bytes_view
from trackpoint._storage import naming
from trackpoint._storage.readahead import start_readahead
from trackpoint._storage.shard_files import ShardFiles, identity, start_shard
from trackpoint._storage.spans import Spans
from trackpoint._storage.storage import storage_for
from trackpoint.errors import CheckpointError, DataLossError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = ["BundleReader", "Entry"]


class BundleReader:
    """Read tensors from ``prefix.index`` and its ``prefix.data-*`` shards.

    Examples:
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
        one_shard_early: bool = False,
    ) -> None:
        """Open ``prefix.index``; with ``damaged_blocks``, skip and record damaged index blocks.

        ``tuning`` sets how data files are read (see :class:`ReadTuning`). ``index``: at a URL,
        the index object's bytes and stat that the caller has just fetched
        (:func:`~trackpoint._format.state_file.resolve_index`). ``one_shard_early``: with
        ``index``, the caller expects one data shard and to read most of it (a repeated
        restore): its download starts before the index is parsed (``Storage.start_data``), and
        is let go if the index says otherwise.
        """
        # An overwrite of the prefix cut short inside TF's window is read from its kept
        # previous version (see trackpoint._storage.previous).
        storage = storage_for(prefix)
        self.prefix = storage.readable_prefix(prefix)
        self.index_path = naming.index_filename(self.prefix)
        self.tuning = tuning
        given = index if index is not None and self.prefix == prefix else None
        early = None
        if one_shard_early and given is not None and storage.local_copies:
            early = start_shard(storage, naming.data_filename(self.prefix, 0, 1), tuning.prefetch_bytes)
        try:
            table, header, stat = read_index(prefix, self.index_path, damaged_blocks, given)
        except BaseException:
            if early is not None:
                early.cancel()
            raise
        count = len(table.keys) - 1
        self.num_shards = header.num_shards
        self.big_endian = header.endianness == pb.BundleHeaderProto.BIG
        self._table = table
        self._rows: dict[bytes, int] = dict(zip(table.keys[1:], range(1, count + 1)))  # key -> row of the table
        self._spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # for entry_columns, made on demand
        self._files = ShardFiles(self.prefix, self.index_path, identity(stat), self.num_shards, readable_key)
        if early is not None:
            if self.num_shards == 1:  # the object it downloads is this shard
                self._files.begun(0, early)
            else:
                early.cancel()

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
            self._spans = (padded(table.data), table.starts, table.ends)
        return self._spans

    # -- data files ---------------------------------------------------------------------

    def data_path(self, shard_id: int) -> str:
        return self._files.path(shard_id)

    def shard_fd(self, shard_id: int, key: str, spans: Spans | None = None) -> tuple[int, int]:
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
        if not self._files.local_copies:
            return
        # The data object's size, as far as the index tells it without decoding every entry:
        # the last entry's end (a writer lays values out in key order). A wrong guess costs
        # only a HEAD, or a GET let go unread (see RangedObject.opened).
        expected: dict[int, int] = {}
        if self._rows:
            row = len(self._table.keys) - 1
            try:
                last = parse_entry(decode_key(self._table.keys[row]), self._table.value(row), self.index_path)
                expected[last.shard_id] = last.offset + last.size
            except CheckpointError:
                pass  # a damaged entry: the read that needs it says so
        self._files.prefetch(self.tuning.prefetch_bytes, expected)

    def file_state(self, shard_id: int, fd: int) -> tuple[int, int]:
        """What changes when the contents of the data shard open as ``fd`` change (see
        :meth:`ShardFiles.state`): an in-place read compares it between its two passes."""
        return self._files.state(shard_id, fd)

    def expect(self, keys: Sequence[str], shard_ids: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Say which stored bytes will be read (rows of ``keys``, checked already): at a URL
        they are fetched now, neighbours together, instead of one request per tensor (see :mod:`.read_hints`)."""
        read_hints.expect(self._files, keys, shard_ids, offsets, sizes)

    def expect_entries(self, entries: Sequence[Entry]) -> None:
        """:meth:`expect` for entries about to be read one by one (a tool's, or every entry for a
        verify); one whose shard cannot be opened is left for its read to report."""
        read_hints.expect_entries(self._files, entries)

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

    def ended_early(self, shard_id: int, key: str, at: int | None = None) -> CheckpointError:
        """The error for a data file that ends (at byte ``at``) before a tensor the index places in it.

        The message names the key, not ``at``; ``partial(reader.ended_early, shard_id, key)`` is
        the :data:`.pread.Ended` of reads of that key's bytes.
        """
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
            return sliced_read.read_sliced(self, entry, dtype, out)
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
            stored = read_stored(self, entry, verify=False)
            what = f"{path}: key {readable_key(entry.key)!r}"
            try:
                return decode_strings(stored, entry.shape, unmask(entry.crc32c), what)
            except DataLossError as exc:
                raise self.damaged(path, entry.key, str(exc)) from exc
        array = out if out is not None else np.empty(entry.shape, dtype=dtype.numpy)
        read_stored(self, entry, numeric_bytes_view(array) if array.size else memoryview(b""))
        if self.big_endian:
            array.byteswap(inplace=True)
        return array

    def read_region(
        self, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None = None
    ) -> np.ndarray:
        """Read the part ``bounds`` (``(start, stop)`` per dimension) of one tensor, checksums verified.

        Only the stored slices that overlap the region are read, each whole (a checksum covers
        a stored slice, not part of it); a tensor stored whole is one such slice. A process
        holding one shard of a tensor saved by several (or by one) reads this way (see
        :mod:`.sliced_read`).

        Raises:
            InvalidArgumentError: The region does not lie inside the tensor, or the tensor's
                shape is not ``full_shape`` (when given).
        """
        return sliced_read.read_region(self, key, bounds, full_shape)

    def region_entry(
        self, key: str | bytes, bounds: Sequence[tuple[int, int]], full_shape: Sequence[int] | None = None
    ) -> Entry | None:
        """The checked plain entry whose bytes are exactly the region ``bounds`` of a tensor (the
        tensor stored whole, or one stored slice), or None when the region takes several or part
        of one. Such a region can be read in place like a whole tensor (see :mod:`.in_place`).

        Raises:
            InvalidArgumentError: As :meth:`read_region`.
        """
        return sliced_read.region_entry(self, key, bounds, full_shape)

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
        # Half-built, or at interpreter exit: nothing left to close. Not contextlib.suppress: at
        # exit this module's globals may be None already (the name contextlib included).
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110
            pass
