"""A bundle's index: the shards' entries merged, then written and published with the data files.

Every data shard's writer keeps its entries (:class:`~trackpoint._format.index_entries.IndexEntries`);
:func:`merge_shards` combines them the way TF's ``MergeBundles`` does (slices of one key gathered
into its full entry), and :func:`write_index` writes the sorted table under the header
``{num_shards, version.producer=1}`` (key ``""``) and puts the data files and the index in place,
the index last.

Examples:
    >>> import numpy as np, tempfile, os
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> from trackpoint._format.bundle_writer import ShardWriter
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> shard = ShardWriter(prefix + ".data-00000-of-00001", 0); shard.add("x", np.arange(2)); shard.close()
    >>> write_index(prefix, merge_shards([shard]), 1, [(shard.temp_path, shard.path)])
    >>> BundleReader(prefix).read("x")
    array([0, 1])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from trackpoint._format import slices, sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.dtypes import DType
from trackpoint._format.index_entries import IndexEntries
from trackpoint._format.keys import decode_key, encode_key
from trackpoint._storage import atomic, naming
from trackpoint._storage.storage import storage_for
from trackpoint.errors import InvalidArgumentError

__all__ = ["ShardEntries", "header_bytes", "merge_shards", "write_index"]

TENSOR_BUNDLE_VERSION = 1


def header_bytes(num_shards: int) -> bytes:
    header = pb.BundleHeaderProto(num_shards=num_shards)
    header.version.producer = TENSOR_BUNDLE_VERSION
    return header.SerializeToString()


def write_index(
    prefix: str,
    entries: IndexEntries | Mapping[bytes, bytes | pb.BundleEntryProto],
    num_shards: int,
    data_files: Sequence[tuple[str, str]] = (),
    data_synced: Callable[[], None] | None = None,
    others: Sequence[str] = (),
    uploaded: Sequence[tuple[str, str]] = (),
) -> None:
    """Write ``prefix.index`` and publish it together with ``data_files`` (``(temp, final)`` pairs).

    At a URL, ``others`` are data objects of the bundle that other processes put in place
    already, and ``uploaded`` the pairs of ``data_files`` this process put ahead (see
    :meth:`trackpoint._storage.storage.Storage.put_data`), which may be filled as late as the
    return of ``data_synced``.

    The index is written under a temporary name and fsynced; then the data files and the
    index are put in place, the index last (see :meth:`trackpoint._storage.storage.Storage.publish`).
    ``data_synced``, if given, is called before anything is published and must return only
    once the data files are durable (or raise).
    """
    if not isinstance(entries, IndexEntries):
        given = entries
        entries = IndexEntries()
        for key, entry in given.items():
            entries.encoded[key] = entry if isinstance(entry, bytes) else entry.SerializeToString()
    entries.encoded[b""] = header_bytes(num_shards)
    keys, values = entries.sorted_columns()
    entries.clear()  # its columns are in ``values`` now; the memory goes before the table is built
    try:
        table = sstable.build_table_columns(keys, values)
    except InvalidArgumentError as exc:  # a key given twice
        raise InvalidArgumentError(f"{prefix}: {exc}", path=prefix, key=exc.key) from None
    path = naming.index_filename(prefix)
    storage = storage_for(path)

    def commit(temp: str) -> None:
        if data_synced is not None:
            data_synced()
        rest = [pair for pair in data_files if pair not in uploaded]
        storage.publish(rest, temp, path, num_shards, others, uploaded)

    atomic.write_file(path, table, commit, temp=storage.temp_path(path), durable=not storage.local_copies)


class ShardEntries(Protocol):
    """What :func:`merge_shards` reads of a shard: a :class:`ShardWriter`, or one written elsewhere."""

    @property
    def path(self) -> str: ...
    @property
    def shard_id(self) -> int: ...
    @property
    def entries(self) -> IndexEntries: ...
    @property
    def sliced(self) -> dict[bytes, tuple[str, DType, tuple[int, ...], list[slices.Extents]]]: ...


def merge_shards(shards: Sequence[ShardEntries], whole_remedy: str | None = None) -> IndexEntries:
    """All entries of the shards, in shard order; slices of one key gathered into its full entry.

    The full entry of a sliced tensor takes the shard id of its first slice and lists the
    slices shard by shard, as TF's merge leaves them. The slices of a key never overlap; they
    may cover part of it (one worker's part of a checkpoint, merged later) unless
    ``whole_remedy`` is given: then they must tile it, and the error says that remedy.

    Raises:
        InvalidArgumentError: A key is stored whole twice, or whole and sliced, or its slices
            disagree in dtype or shape, overlap, or (with ``whole_remedy``) leave part of it out.
    """
    if len(shards) == 1 and not shards[0].sliced:
        return shards[0].entries
    entries = IndexEntries()
    merged: dict[bytes, pb.BundleEntryProto] = {}
    full: dict[bytes, tuple[DType, tuple[int, ...]]] = {}
    whole: set[bytes] = (
        set()
    )  # keys stored whole, to tell a slice of one apart (a key stored whole twice is found later)
    for shard in shards:
        entries.extend(shard.entries)
        whole.update(shard.entries.encoded)
        if shard.sliced:
            whole.update(map(encode_key, shard.entries.names))
    for shard in shards:
        for key, (name, dtype, shape, parts) in shard.sliced.items():
            entry = merged.get(key)
            if entry is None and key not in whole:
                entry = merged[key] = pb.BundleEntryProto(dtype=dtype.enum, shard_id=shard.shard_id)
                entry.shape.CopyFrom(_shape_proto(shape))
                full[key] = (dtype, shape)
            elif entry is None or full.get(key) != (dtype, shape):
                raise InvalidArgumentError(
                    f"{shard.path}: slices of {name!r} disagree with another shard's in "
                    "dtype or shape, or the key is also stored whole"
                )
            entry.slices.extend(slices.extents_to_proto(e) for e in parts)
    for key, entry in merged.items():
        dtype, shape = full[key]
        # Whether the slices of a distributed save tile the tensor is the plan's check.
        parts = [slices.extents_from_proto(p) for p in entry.slices]
        problem = slices.cover_problem(shape, parts, complete=whole_remedy is not None)
        if problem is not None:
            name = decode_key(key)
            raise InvalidArgumentError(
                f"{shards[0].path}: tensor {name!r} of shape {list(shape)} is saved in slices, and {problem}. "
                f"{whole_remedy or 'Save each block once'}",
                key=name,
            )
        entries.encoded[key] = entry.SerializeToString()
    return entries


def _shape_proto(shape: Sequence[int]) -> pb.TensorShapeProto:
    proto = pb.TensorShapeProto()
    for dim in shape:
        proto.dim.add().size = int(dim)
    return proto
