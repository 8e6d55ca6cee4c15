"""``torch.distributed.checkpoint`` (DCP) storage that writes and reads TF checkpoints.

DCP plans a save (which rank writes which tensor, each shard of a ``DTensor`` by its owner,
replicated values once) and hands each rank its items; these classes are only the storage
under that plan, as ``FileSystemWriter``/``FileSystemReader`` are. Each rank that has items
writes one data file (``.data-0000i-of-0000N``, numbered by the coordinator in
``prepare_global_plan``); a shard is stored as a TF slice of the whole tensor; ``finish`` on
the coordinator merges every rank's entries into the ``.index`` and publishes it last, after
renaming the data files into place (so the directory must be one every rank sees, as with
DCP's own writer). At a URL each rank but the coordinator uploads its own data object once it
is written, and the coordinator's conditional index is the commit. Keys are DCP's fully
qualified names (``model.0.weight``); values DCP keeps as bytes (non-tensor state) are scalar
string tensors. The result is a name-based TF checkpoint: ``tf.train.load_checkpoint`` and
``tp.load_checkpoint`` read it whole, and the reader here loads it at any world size, each rank
reading only the slices its shards overlap.
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint import Metadata, StorageReader, StorageWriter
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from trackpoint._io import (
    BundleReader,
    ShardWriter,
    data_filename,
    encode_key,
    slice_keys,
    slices,
    storage_for,
    use_storage_options,
)
from trackpoint._pipeline import rank_files
from trackpoint.errors import InvalidArgumentError
from trackpoint.torch._tensors import as_array, check_value, copy_into, torch_dtype

__all__ = ["TFStorageReader", "TFStorageWriter"]


@dataclasses.dataclass(frozen=True)
class _File:
    """What the coordinator assigns a rank: its data file's number, of how many."""

    shard_id: int
    total: int


class TFStorageWriter(StorageWriter):
    """Storage for ``torch.distributed.checkpoint.save`` that writes a TF checkpoint at ``prefix``.

    Args:
        prefix: The checkpoint prefix: a local path or an fsspec URL (then each rank uploads its
            own data object). ``dcp.save(..., checkpoint_id=...)`` replaces it.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept in this process for every URL under the prefix's parent (never
            above the bucket), as ``tp.set_storage_options`` keeps them, and for a
            ``checkpoint_id`` given later too. Give them on every rank. Local paths take none.

    Example (on every rank; the state may hold ``DTensor``s):
        >>> import torch.distributed.checkpoint as dcp                         # doctest: +SKIP
        >>> from trackpoint.torch import TFStorageWriter                        # doctest: +SKIP
        >>> dcp.save({"model": model.state_dict()}, storage_writer=TFStorageWriter("run/ckpt"))  # doctest: +SKIP
    """

    def __init__(self, prefix: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        use_storage_options(prefix, storage_options)
        self.prefix = os.fspath(prefix)
        self._storage_options = storage_options
        self._coordinator = False

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            use_storage_options(checkpoint_id, self._storage_options)
            self.prefix = os.fspath(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return False  # never picked for a bare checkpoint_id: given explicitly only

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._coordinator = is_coordinator

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # On the coordinator, before any rank writes: a file for each rank with items.
        storage_for(self.prefix).prepare(self.prefix)
        writing = [i for i, plan in enumerate(plans) if plan.items]
        numbers = {rank: n for n, rank in enumerate(writing)}
        return [
            dataclasses.replace(plan, storage_data=_File(numbers[i], len(writing)) if i in numbers else None)
            for i, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        future: Future[list[WriteResult]] = Future()
        assigned = plan.storage_data
        if not plan.items or not isinstance(assigned, _File):
            future.set_result([])
            return future
        writer = ShardWriter(data_filename(self.prefix, assigned.shard_id, assigned.total), assigned.shard_id)
        try:
            results, rows = [], []
            for item in plan.items:
                key = item.index.fqn
                data = planner.resolve_data(item)
                if item.type == WriteItemType.BYTE_IO and isinstance(data, io.IOBase):
                    data.seek(0)
                    value: Any = data.read()
                    size = len(value)
                elif isinstance(data, torch.Tensor):
                    array = as_array(data.detach(), key)
                    size = array.nbytes
                    chunk = item.tensor_data.chunk if item.tensor_data is not None else None
                    full = tuple(item.tensor_data.size) if item.tensor_data is not None else array.shape
                    if item.type == WriteItemType.SHARD and chunk is not None and tuple(chunk.sizes) != full:
                        extents = tuple((int(o), int(s)) for o, s in zip(chunk.offsets, chunk.sizes))
                        value = slices.SlicedValue(array, full, extents)
                    else:
                        value = array
                else:
                    raise InvalidArgumentError(
                        f"{self.prefix}: DCP gave {type(data).__name__} for tensor {key!r}", key=key
                    )
                rows.append((key, value))
                results.append(WriteResult(index=item.index, size_in_bytes=size, storage_data=None))
            writer.add_many(rows)
            writer.close()
            if not self._coordinator:  # puts nothing unless the storage puts data ahead of the index
                # The coordinator's finish commits the index only once every rank's data is in
                # place, and it cannot see another machine's local files: each rank puts its own.
                rank_files.upload(self.prefix, [writer])
        except BaseException:
            writer.abort()
            raise
        # The entries travel to the coordinator with the first result (finish merges them).
        results[0] = dataclasses.replace(results[0], storage_data=rank_files.encode([writer]))
        future.set_result(results)
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        reports = [r.storage_data for rank in results for r in rank if isinstance(r.storage_data, bytes)]
        shards = [shard for report in reports for shard in rank_files.decode(report)]
        own = {shard.path for shard in shards if os.path.exists(shard.temp_path)}  # one directory for all
        rank_files.publish(self.prefix, shards, len(shards), own)


class TFStorageReader(StorageReader):
    """Storage for ``torch.distributed.checkpoint.load`` that reads a TF checkpoint at ``prefix``
    (one :class:`TFStorageWriter` wrote, or any other whose keys are the state's names).

    Args:
        prefix: The checkpoint prefix: a local path or an fsspec URL. ``dcp.load(...,
            checkpoint_id=...)`` replaces it.
        storage_options: For a URL, options of its fsspec filesystem, kept as
            :class:`TFStorageWriter` keeps them. Give them on every rank.

    Example (on every rank, at any world size):
        >>> dcp.load(state, storage_reader=TFStorageReader("run/ckpt"))           # doctest: +SKIP
    """

    def __init__(self, prefix: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        use_storage_options(prefix, storage_options)
        self.prefix = os.fspath(prefix)
        self._storage_options = storage_options

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            use_storage_options(checkpoint_id, self._storage_options)
            self.prefix = os.fspath(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return False

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Every tensor's dtype, shape and stored chunks (its slices, or itself whole)."""
        state: dict[str, TensorStorageMetadata | BytesStorageMetadata] = {}
        with BundleReader(self.prefix) as reader:
            entries = reader.entries()
            hidden = slice_keys(entries)
            for entry in entries:
                if encode_key(entry.key) in hidden:
                    continue  # a slice, listed under its whole tensor's key
                key = entry.key
                dtype = reader.checked(entry)
                if dtype.is_string:
                    state[key] = BytesStorageMetadata()
                    continue
                if entry.is_sliced:
                    boxes = [slices.resolve(slices.extents_from_proto(p), entry.shape, key) for p in entry.slices]
                else:
                    boxes = [tuple((0, d) for d in entry.shape)]
                chunks = [
                    ChunkStorageMetadata(
                        offsets=torch.Size([a for a, _ in box]), sizes=torch.Size([b - a for a, b in box])
                    )
                    for box in boxes
                ]
                state[key] = TensorStorageMetadata(
                    properties=TensorProperties(dtype=torch_dtype(dtype.numpy)),
                    size=torch.Size(entry.shape),
                    chunks=chunks,
                )
        return Metadata(state_dict_metadata=state)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        pass

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read each item's region (only the stored slices it overlaps), checksums verified."""
        with BundleReader(self.prefix) as reader:
            for item in plan.items:
                key = item.storage_index.fqn
                if item.type == LoadItemType.BYTE_IO:
                    value = reader.read(key)
                    if not isinstance(value, bytes):
                        raise InvalidArgumentError(f"{self.prefix}: key {key!r} is not a scalar string", key=key)
                    planner.load_bytes(item, io.BytesIO(value))
                    continue
                chunk = _offsets(item.storage_index, len(item.lengths))
                bounds = [
                    (c + start, c + start + length)
                    for c, start, length in zip(chunk, item.storage_offsets, item.lengths)
                ]
                region = reader.read_region(key, bounds)
                target = planner.resolve_tensor(item).detach()
                copy_into(target, check_value(target, region, f"{self.prefix}: key {key!r}"))
                planner.commit_tensor(item, target)
        future: Future[None] = Future()
        future.set_result(None)
        return future


def _offsets(index: MetadataIndex, rank: int) -> tuple[int, ...]:
    """Where the stored chunk an item reads from starts (its offsets in the whole tensor)."""
    return tuple(int(o) for o in index.offset) if index.offset is not None else (0,) * rank
