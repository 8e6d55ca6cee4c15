"""``tp.convert`` to safetensors: the files written, one tensor at a time, as ``transformers`` shards them.

The destination is checked first (:func:`check_destination`), then every file's header, before a
byte is written; shards are written under temporary names, put in place once all are complete,
and the index last. At a URL the files are written locally, then each put under its final name
only where nothing is (:func:`trackpoint._io.publish_objects`).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile

import numpy as np

from trackpoint._io import BundleReader, fsync_directory, list_names, publish_objects, storage_for
from trackpoint.errors import CheckpointError, InvalidArgumentError
from trackpoint.reader import CheckpointReader
from trackpoint.tools import _hf_layout, _tf_stream
from trackpoint.tools._names import MappingRow
from trackpoint.tools._safetensors_format import MAX_HEADER_BYTES
from trackpoint.tools._safetensors_writer import SafetensorsWriter, header_length
from trackpoint.tools._tensor_copy import check_parents, missing_directories, remove_directories, write_failed

__all__ = ["SINGLE_FILE", "check_destination", "write_safetensors"]

SINGLE_FILE = "model.safetensors"


def check_destination(dst: str) -> None:
    """Refuse, before anything is planned or made, a destination that cannot be written:
    a ``.safetensors`` file name that is a directory, or a parent that is not a directory."""
    if not storage_for(dst).has_directories:
        return  # an object store: no directories to be in the way
    if dst.endswith(".safetensors") and os.path.isdir(dst):
        raise InvalidArgumentError(
            f"{dst}: is a directory, so no safetensors file can be written under that name; name a file that is "
            "not a directory, or give a directory without the .safetensors suffix",
            path=dst,
        )
    directory, _ = _destination(dst)
    if directory == dst and os.path.exists(directory) and not os.path.isdir(directory):
        raise InvalidArgumentError(
            f"{dst}: exists and is not a directory; name a directory or a .safetensors file", path=dst
        )
    check_parents(os.path.join(directory, "x"), dst)


def _destination(dst: str) -> tuple[str, str]:
    """``(directory, single-file name)`` of a safetensors destination."""
    if dst.endswith(".safetensors"):
        return os.path.dirname(dst) or ".", os.path.basename(dst)
    return dst, SINGLE_FILE


def _refuse_mixing(directory: str, single: str, names: list[str]) -> None:
    """Refuse a destination whose existing weights the new files would mix with.

    A single file replaces its namesake atomically, so that is allowed when no index is there. Shards
    are put in place one by one before their index: over older weights a crash in between would
    leave an index naming a mix of old and new files, and a ``model.safetensors`` left beside a new
    index is what ``transformers`` loads first. So any of those already there is an error.
    """
    if storage_for(directory).has_directories and not os.path.isdir(directory):
        return
    index = single + ".index.json"
    stem = single.removesuffix(".safetensors")
    present = sorted(
        name
        for name in list_names(directory)
        if name == index
        or (len(names) > 1 and (name == single or (name.startswith(stem + "-") and name.endswith(".safetensors"))))
    )
    if present:
        raise InvalidArgumentError(
            f"{directory}: already holds safetensors weights ({', '.join(present[:4])}) that the new "
            f"{'shards' if len(names) > 1 else 'file'} would mix with; remove them or convert into another directory",
            path=directory,
        )


def _write_files(
    reader: CheckpointReader,
    bundle: BundleReader,
    by_name: dict[str, MappingRow],
    directory: str,
    groups: list[list[str]],
    names: list[str],
    nbytes: dict[str, int],
    metadata: dict[str, str],
    writers: list[SafetensorsWriter],
) -> list[str]:
    """Write every shard (appending its writer to ``writers``, for the caller to abort), then put them in
    place; the paths written."""
    # Transposed, sliced, string or big-endian tensors are read whole, into one reused buffer.
    slow = [
        row for row in by_name.values() if row.transposed or not _tf_stream.streamable(bundle, bundle.entry(row.source))
    ]
    scratch = bytearray(max((nbytes[row.name] for row in slow), default=0))
    for group, file_name in zip(groups, names):
        rows = [by_name[name] for name in group]
        writer = SafetensorsWriter(
            os.path.join(directory, file_name),
            [(row.name, row.dtype, row.shape) for row in rows],
            metadata if not writers else {"format": metadata["format"]},
            publish=False,
        )
        writers.append(writer)
        in_order = [by_name[info.name] for info in writer.layout.values()]  # in file order: sequential writes
        entries = [bundle.entry(row.source) for row in in_order]
        bundle.expect_entries(entries)  # at a URL: this file's tensors fetched together
        for row, entry, following in zip(in_order, entries, [*entries[1:], None]):
            if following is not None:
                bundle.prefetch(following)  # read from the disk while this one is written
            if not row.transposed and _tf_stream.streamable(bundle, entry):
                writer.write_pieces(row.name, _tf_stream.stored_pieces(bundle, entry))
                continue
            source_shape = row.shape[::-1] if row.transposed else row.shape
            count = math.prod(source_shape)
            value = (
                np.frombuffer(scratch, row.dtype, count).reshape(source_shape)
                if count
                else np.empty(source_shape, row.dtype)
            )
            reader.get_tensor(row.source, out=value)
            writer.write(row.name, value.T if row.transposed else value)
        writer.finish()
    files = []
    for writer in writers:  # every shard complete: now put them in place, the index last
        os.replace(writer.temp, writer.path)
        files.append(writer.path)
    return files


def write_safetensors(
    reader: CheckpointReader,
    bundle: BundleReader,
    mapping: tuple[MappingRow, ...],
    dst: str,
    shard_bytes: int,
    metadata: dict[str, str],
) -> tuple[str, ...]:
    """Write the tensors of ``mapping``, sharded as ``transformers`` does; ``metadata`` goes into the
    first file (only its ``format`` into the others)."""
    directory, single = _destination(dst)
    if storage_for(directory).local_copies:  # files written are copies staged for an upload
        return _upload_safetensors(reader, bundle, mapping, directory, single, shard_bytes, metadata)
    nbytes = {row.name: math.prod(row.shape) * row.dtype.itemsize for row in mapping}
    groups = _hf_layout.plan_shards([(row.name, nbytes[row.name]) for row in mapping], shard_bytes)
    names = _hf_layout.shard_names(single, len(groups))
    _refuse_mixing(directory, single, names)
    by_name = {row.name: row for row in mapping}
    # Each file's header checked before any is written: a later shard's would fail half way.
    for number, (group, file_name) in enumerate(zip(groups, names)):
        specs = [(row.name, row.dtype, row.shape) for row in (by_name[name] for name in group)]
        length = header_length(specs, metadata if number == 0 else {"format": metadata["format"]})
        if length > MAX_HEADER_BYTES:
            raise InvalidArgumentError(
                f"{os.path.join(directory, file_name)}: its safetensors header would take {length} bytes for "
                f"{len(group)} tensors, more than the {MAX_HEADER_BYTES} readers (the official library too) "
                "accept; give a smaller max_shard_size (--max-shard-size) so fewer tensors share a file, or drop some",
                path=dst,
            )
    made = missing_directories(directory)
    writers: list[SafetensorsWriter] = []
    try:
        os.makedirs(directory, exist_ok=True)
        files = _write_files(reader, bundle, by_name, directory, groups, names, nbytes, metadata, writers)
        fsync_directory(directory)
        if len(writers) > 1:
            index = os.path.join(directory, single + ".index.json")
            _hf_layout.write_index(index, sum(nbytes.values()), {n: f for g, f in zip(groups, names) for n in g})
            files.append(index)
    except BaseException as exc:
        for writer in writers:
            writer.abort()
        remove_directories(made)
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointError):
            raise write_failed(dst, "convert", exc) from exc
        raise
    return tuple(files)


def _upload_safetensors(
    reader: CheckpointReader,
    bundle: BundleReader,
    mapping: tuple[MappingRow, ...],
    directory: str,
    single: str,
    shard_bytes: int,
    metadata: dict[str, str],
) -> tuple[str, ...]:
    """Write the files locally, then put them at the URL ``directory`` as a checkpoint is put there:
    each under its final name only if nothing is there, the index (or the single file) last."""
    directory = directory.rstrip("/")
    nbytes = {row.name: math.prod(row.shape) * row.dtype.itemsize for row in mapping}
    names = _hf_layout.shard_names(
        single, len(_hf_layout.plan_shards([(r.name, nbytes[r.name]) for r in mapping], shard_bytes))
    )
    _refuse_mixing(directory, single, names)  # before the local copy is made
    stage = tempfile.mkdtemp(prefix="tp-convert-")
    try:
        written = write_safetensors(reader, bundle, mapping, os.path.join(stage, single), shard_bytes, metadata)
        urls = [f"{directory}/{os.path.basename(path)}" for path in written]
        publish_objects(list(zip(written, urls)), what=f"the safetensors weights {urls[-1]}")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return tuple(urls)
