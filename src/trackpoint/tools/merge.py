"""TF's ``MergeBundles``: bundles written as separate parts (one per task or device) merged into one.

A TF2 save on several devices first writes each device's tensors as a bundle of its own
(``<prefix>_temp/part-00000-of-00002`` ...), then merges them into ``<prefix>``; a merge cut
short leaves the parts behind. :func:`merge` finishes that job without TensorFlow, as TF
does it: the parts' data files become the merged checkpoint's data files unchanged (copied
byte for byte, so every checksum stays valid, never decoded), each numbered by where it is
first used, parts in the order given and keys in index order; entries keep their offsets and
get the new shard ids; the slices of a partitioned tensor stored in several parts are joined
under one full entry. The parts are left as they are.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

from trackpoint._io import (
    BundleReader,
    Entry,
    data_filename,
    encode_key,
    exists,
    open_regular,
    readable_key,
    remove_quietly,
    storage_for,
    use_storage_options_for_urls,
    write_index,
)
from trackpoint._io import tensor_bundle_pb2 as pb
from trackpoint.errors import CheckpointError, InvalidArgumentError, NotFoundError
from trackpoint.tools._tensor_copy import check_prefix, missing_directories, remove_directories, write_failed

__all__ = ["merge"]


def merge(parts: Sequence[str], out: str, *, storage_options: Mapping[str, Any] | None = None) -> str:
    """Merge the bundles ``parts`` (prefixes, in order) into one checkpoint at the prefix ``out``.

    Args:
        parts: The part prefixes, e.g. ``["ck_temp/part-00000-of-00002", "ck_temp/part-00001-of-00002"]``.
        out: The merged checkpoint's prefix; written atomically (the index is published last).
        storage_options: Options of the fsspec filesystem (``endpoint_url``, ``key``, ``secret``...)
            for the parts and ``out`` that are URLs (local ones are skipped), kept for every URL under
            each one's parent (never above the bucket), as ``tp.set_storage_options`` keeps them.

    Returns:
        ``out``.

    Raises:
        NotFoundError: A part does not exist.
        InvalidArgumentError: A key is in two parts (not as slices of one tensor), slices of one
            tensor disagree in dtype or shape, the parts differ in byte order, ``out`` is a part
            or a directory, or ``storage_options`` are not a mapping with ``str`` keys or come
            with local paths only.
        WriteError: ``out`` cannot be written (a parent is a file, no permission, disk full).
        DataLossError: A part's index is damaged, or an entry lies outside its data file.

    Examples:
        >>> import numpy as np, os, tempfile
        >>> import trackpoint as tp
        >>> d = tempfile.mkdtemp()
        >>> a = tp.save_tensors(os.path.join(d, "part-0"), {"w": np.ones(2)})
        >>> b = tp.save_tensors(os.path.join(d, "part-1"), {"b": np.zeros(3)})
        >>> out = merge([a, b], os.path.join(d, "ckpt"))
        >>> sorted(os.listdir(d))[:3], tp.list_variables(out)
        (['ckpt.data-00000-of-00002', 'ckpt.data-00001-of-00002', 'ckpt.index'], [('b', [3]), ('w', [2])])
    """
    if isinstance(parts, str) or not parts:
        raise InvalidArgumentError("merge: pass a list of part prefixes, e.g. merge([part0, part1], out)")
    use_storage_options_for_urls([*parts, out], storage_options)
    out = os.fspath(out)
    check_prefix(out, "merge")
    prefixes = [os.fspath(p) for p in parts]
    for prefix in prefixes:
        if os.path.realpath(prefix) == os.path.realpath(out):
            raise InvalidArgumentError(f"merge: the output {out!r} is one of the parts; merge into a new prefix")
    merged: dict[bytes, pb.BundleEntryProto] = {}
    owner: dict[bytes, str] = {}
    sources: list[str] = []  # source data file of each new shard id
    shard_of: dict[str, int] = {}
    endianness = None
    for prefix in prefixes:
        with BundleReader(prefix) as bundle:
            big = bundle.big_endian
            if endianness is not None and big != endianness:
                raise InvalidArgumentError(
                    f"merge: {prefix} is {'big' if big else 'little'}-endian, unlike {prefixes[0]}; merge parts of "
                    "one save"
                )
            endianness = big
            if big:
                raise InvalidArgumentError(f"merge: {prefix} is big-endian; trackpoint merges little-endian bundles")
            for entry in bundle.entries():  # index order; every entry checked against its file
                _merge_entry(prefix, bundle, entry, merged, owner, sources, shard_of)
            # A data file no entry uses still counts, as in the header's shard count.
            for shard_id in range(bundle.num_shards):
                path = bundle.data_path(shard_id)
                if path not in shard_of:
                    shard_of[path] = len(sources)
                    sources.append(path)
    _publish(out, merged, sources)
    return out


def _merge_entry(
    prefix: str,
    bundle: BundleReader,
    entry: Entry,
    merged: dict[bytes, pb.BundleEntryProto],
    owner: dict[bytes, str],
    sources: list[str],
    shard_of: dict[str, int],
) -> None:
    key = encode_key(entry.key)
    existing = merged.get(key)
    if existing is not None:
        if not existing.slices or not entry.slices:
            raise InvalidArgumentError(
                f"merge: key {readable_key(entry.key)!r} is in both {owner[key]} and {prefix}; parts of one save "
                "never share a key: check the list of parts",
                key=entry.key,
            )
        if existing.dtype != entry.dtype_enum or tuple(d.size for d in existing.shape.dim) != entry.shape:
            raise InvalidArgumentError(
                f"merge: the slices of {readable_key(entry.key)!r} in {owner[key]} and {prefix} disagree in "
                "dtype or shape",
                key=entry.key,
            )
        existing.slices.extend(entry.slices)
        return
    path = bundle.data_path(entry.shard_id)
    if path not in shard_of:
        shard_of[path] = len(sources)
        sources.append(path)
    if not entry.slices:
        bundle.checked(entry)  # inside its data file: the copy will hold the same bytes
    proto = pb.BundleEntryProto(
        dtype=entry.dtype_enum,
        shard_id=shard_of[path],
        offset=entry.offset,
        size=entry.size,
        crc32c=entry.crc32c,
    )
    proto.shape.SetInParent()
    for dim in entry.shape:
        proto.shape.dim.add().size = dim
    proto.slices.extend(entry.slices)
    merged[key] = proto
    owner[key] = prefix


def _publish(out: str, merged: dict[bytes, pb.BundleEntryProto], sources: list[str]) -> None:
    """Copy the data files under temporary names beside ``out``, then publish them with the index.

    On any error nothing is published, and the directories made for ``out`` are removed again.
    """
    made = missing_directories(os.path.dirname(os.path.abspath(out)))
    count = len(sources)
    copies: list[tuple[str, str]] = []
    try:
        storage_for(out).prepare(out)
        for shard_id, source in enumerate(sources):
            final = data_filename(out, shard_id, count)
            temp = storage_for(final).temp_path(final)
            copies.append((temp, final))
            try:
                with _open_source(source) as src, open(temp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                    dst.flush()
                    os.fsync(dst.fileno())
            except FileNotFoundError as exc:
                if not exists(source):
                    raise NotFoundError(f"merge: data file {source} is missing", path=source) from exc
                raise
        write_index(out, dict(merged), count, copies)
    except BaseException as exc:
        for temp, _ in copies:
            remove_quietly(temp)
        remove_directories(made)
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointError):
            raise write_failed(out, "merge", exc) from exc
        raise


def _open_source(path: str) -> BinaryIO:
    """A part's data file, to copy (at a URL, a local copy downloaded whole)."""
    return os.fdopen(open_regular(path, "data file")[0], "rb")
