"""The element-wise (weighted) mean of checkpoints with the same layout, one tensor at a time.

Floating-point tensors (float16/32/64, bfloat16, float8_*) are averaged in float64 and
complex ones in complex128, then stored in their own dtype; every other tensor (integers
such as ``save_counter`` or a step, bools, strings, the object graph) is taken from the last
checkpoint, which also gives the result its object graph and data-file layout.

Memory: for tensors every input stores whole, a few MiB whatever their sizes. Such a tensor is
averaged in steps of 64Ki elements (512 KiB of float64 accumulator), each input's step read into
one reused buffer, its checksum extended and verified after its last step, and the mean written in
2 MiB chunks as they fill (:meth:`~trackpoint._format.bundle_writer.BundleWriter.add_chunks`); a
large tensor taken from the last checkpoint is copied in chunks too (:mod:`._chunk_copy`). A tensor
saved in slices is accumulated into a result as large as itself, slice by slice when every input
slices it alike; only a tensor the inputs slice differently (or store unsliced in one, sliced in
another), or a big-endian checkpoint, is read whole, each input at once: those cost one tensor per input.

Examples:
    >>> import numpy as np, os, tempfile
    >>> import trackpoint as tp
    >>> d = tempfile.mkdtemp()
    >>> a = tp.save_tensors(os.path.join(d, "a"), {"w": np.float32([1, 2]), "step": np.int64(1)})
    >>> b = tp.save_tensors(os.path.join(d, "b"), {"w": np.float32([3, 6]), "step": np.int64(2)})
    >>> out = average([a, b], os.path.join(d, "mean"))
    >>> print(tp.load_variable(out, "w"), tp.load_variable(out, "step"))
    [2. 4.] 2
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from trackpoint._io import (
    BundleReader,
    DType,
    Entry,
    StoredStream,
    check_disjoint,
    encode_key,
    enum_name,
    family,
    numeric_bytes_view,
    readable_key,
    slice_keys,
    slices,
    use_storage_options_for_urls,
)
from trackpoint.errors import DataLossError, InvalidArgumentError
from trackpoint.tools import _chunk_copy
from trackpoint.tools._tensor_copy import check_prefix, new_bundle
from trackpoint.tools._weights import weights_for
from trackpoint.tools.rewrite import source_prefix

__all__ = ["average", "weights_for"]

# 512 KiB of float64 per accumulator chunk: its three buffers stay in the CPU's cache between the passes
# over a chunk, which measured 30% less compute than chunks of a million elements (PERFORMANCE.md).
_CHUNK_ELEMENTS = 1 << 16


def average(
    checkpoints: Sequence[str],
    out: str,
    weights: Any = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Write the element-wise weighted mean of ``checkpoints`` to the prefix ``out``.

    Args:
        checkpoints: One or more checkpoint prefixes (or directories with a state file) of the
            same layout: the same keys, each with the same dtype and shape. One gives a copy
            (its floats round-trip exactly through float64).
        out: The prefix to write; the write is atomic.
        weights: See :func:`weights_for`.
        storage_options: Options of the fsspec filesystem (``endpoint_url``, ``key``, ``secret``...)
            for the checkpoints and ``out`` that are URLs (local ones are skipped), kept for every URL under
            each one's parent (never above the bucket), as ``tp.set_storage_options`` keeps them.

    Returns:
        ``out``.

    Raises:
        InvalidArgumentError: The layouts differ (the message names the first difference),
            malformed weights, ``out`` is a directory, or ``storage_options`` are not a mapping
            with ``str`` keys or come with local paths only.
        DataLossError: A tensor is damaged.
        WriteError: ``out`` cannot be written (a parent is a file, no permission, disk full).

    Examples:
        >>> import numpy as np, os, tempfile
        >>> import trackpoint as tp
        >>> d = tempfile.mkdtemp()
        >>> ps = [tp.save_tensors(os.path.join(d, f"c{i}"), {"w": np.float64([i])}) for i in range(3)]
        >>> tp.load_variable(average(ps, os.path.join(d, "ema"), ("exponential", 0.5)), "w")
        array([1.25])
    """
    if isinstance(checkpoints, str) or len(checkpoints) < 1:
        raise InvalidArgumentError("average: pass a list of checkpoints, e.g. average([a, b, c], out)")
    use_storage_options_for_urls([*checkpoints, out], storage_options)
    prefixes = [source_prefix(p) for p in checkpoints]
    out = os.fspath(out)
    check_prefix(out, "average")
    for p in prefixes:
        if os.path.realpath(p) == os.path.realpath(out):
            raise InvalidArgumentError(f"average: the output {out!r} is one of the inputs; write to a new prefix")
    factors = weights_for(len(prefixes), weights)
    with contextlib.ExitStack() as stack:
        bundles = [stack.enter_context(BundleReader(p)) for p in prefixes]
        layouts = [_layout(b) for b in bundles]
        _check_same(prefixes, layouts)
        for bundle, layout in zip(bundles, layouts):
            bundle.expect_entries(list(layout.values()))  # at a URL: fetched together, not tensor by tensor
        last = layouts[-1]
        used = sorted({e.shard_id for e in last.values()} | {0})
        shard = {old: new for new, old in enumerate(used)}
        result = _ResultBuffer()
        scratch = _chunk_copy.Scratch()
        keys = list(last)
        with new_bundle(out, len(used), "average") as writer:
            for key, following in zip(keys, [*keys[1:], None]):
                if following is not None:  # read the next tensor from the disk while this one is averaged
                    for bundle, layout in zip(bundles, layouts):
                        bundle.prefetch(layout[following])
                entry = last[key]
                dtype = entry.dtype
                entries = [lay[key] for lay in layouts]
                if dtype is not None and (chunks := _chunks(bundles, entries, dtype, factors, scratch)) is not None:
                    writer.add_chunks(key, dtype, entry.shape, chunks, shard[entry.shard_id])
                    continue
                if dtype is not None and _averaged(dtype):
                    value: Any = _mean(bundles, entries, dtype, factors, result)
                else:
                    value = bundles[-1].read(key)
                writer.add(key, value, shard[entry.shard_id])
                del value
    return out


def _chunks(
    bundles: list[BundleReader], entries: list[Entry], dtype: DType, factors: list[float], scratch: _chunk_copy.Scratch
) -> Iterator[memoryview] | None:
    """The result tensor's bytes chunk by chunk, when it is streamed: the mean of a float tensor every
    input stores whole in native byte order, or a large copy of another from the last input; else None."""
    if _averaged(dtype):
        if any(b.big_endian or e.is_sliced for b, e in zip(bundles, entries)):
            return None
        return _mean_chunks([_Stream(b, e, dtype) for b, e in zip(bundles, entries)], factors)
    if _chunk_copy.streams(entries[-1], bundles[-1].checked(entries[-1])):
        return scratch.stored(bundles[-1], entries[-1], dtype, None, entries[-1].key)
    return None


def _averaged(dtype: DType) -> bool:
    return family(dtype) == "float" or dtype.name.startswith("complex")


def _layout(bundle: BundleReader) -> dict[str, Entry]:
    """``{key: entry}`` of the tensors a reader lists (slices through their full entries)."""
    entries = bundle.entries()
    hidden = slice_keys(entries)  # the reader's, so that the layout is what tp.list_variables shows
    return {e.key: e for e in entries if encode_key(e.key) not in hidden}


def _check_same(prefixes: list[str], layouts: list[dict[str, Entry]]) -> None:
    first = layouts[0]
    for prefix, layout in zip(prefixes[1:], layouts[1:]):
        for key in sorted(set(first) ^ set(layout)):
            where, other = (prefixes[0], prefix) if key in first else (prefix, prefixes[0])
            raise InvalidArgumentError(
                f"average: {where} holds {key!r} and {other} does not; average only checkpoints of the same "
                "layout (rewrite one with tp.rewrite first)",
                key=key,
            )
        for key, entry in first.items():
            other_entry = layout[key]
            if (entry.dtype_enum, entry.shape) != (other_entry.dtype_enum, other_entry.shape):
                raise InvalidArgumentError(
                    f"average: {key!r} is {enum_name(entry.dtype_enum)}{list(entry.shape)} in {prefixes[0]} but "
                    f"{enum_name(other_entry.dtype_enum)}{list(other_entry.shape)} in {prefix}; average only "
                    "checkpoints of the same layout",
                    key=key,
                )


class _ResultBuffer:
    """One buffer, as large as the largest mean not streamed (of inputs that store it in slices or
    big-endian), that each such mean is accumulated into and written from.

    A new array per tensor measured several times slower on this VM: fresh pages are slow to touch
    the first time, and 2 GiB of means would be 2 GiB of them (PERFORMANCE.md).
    """

    def __init__(self) -> None:
        self.memory = bytearray()

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` over the buffer, valid until the next call."""
        count = math.prod(shape)
        if not count:
            return np.empty(shape, dtype)
        if len(self.memory) < count * dtype.itemsize:
            self.memory = bytearray()  # the old one goes first: memory holds one result, not two
            self.memory = bytearray(count * dtype.itemsize)
        return np.frombuffer(self.memory, dtype, count).reshape(shape)


def _mean(
    bundles: list[BundleReader], entries: list[Entry], dtype: DType, factors: list[float], buffer: _ResultBuffer
) -> np.ndarray:
    """The weighted mean of one tensor over the inputs, accumulated chunk by chunk.

    A tensor stored in slices is averaged slice by slice when every input slices it alike (one
    save policy): each slice is a plain stored piece, streamed in chunks like a whole tensor.
    Reading the sliced inputs whole, all at once, cost one tensor per input (4 inputs of a 32 MiB
    tensor peaked at 180 MiB). Inputs sliced differently (or big-endian) are still read whole.
    """
    result = buffer.array(tuple(entries[-1].shape), np.dtype(dtype.numpy))
    pieces = [_pieces(b, e, dtype) for b, e in zip(bundles, entries)]
    if any(b.big_endian for b in bundles) or any(p.keys() != pieces[0].keys() for p in pieces):
        _accumulate(result, [_Stream(b, e, dtype, whole=True) for b, e in zip(bundles, entries)], None, factors)
        return result
    for bounds in pieces[0]:
        streams = [_Stream(b, p[bounds], dtype) for b, p in zip(bundles, pieces)]
        _accumulate(result, streams, bounds, factors)
    return result


def _accumulate(
    result: np.ndarray, streams: list[_Stream], bounds: tuple[tuple[int, int], ...] | None, factors: list[float]
) -> None:
    """``result[bounds]`` (all of it for None) as the weighted sum of ``streams``, chunk by chunk."""
    dtype = streams[0].dtype
    flat = result.reshape(-1)
    box = lows = None
    if bounds is not None and tuple(stop - start for start, stop in bounds) != result.shape:
        box, lows = tuple(stop - start for start, stop in bounds), [start for start, _ in bounds]
    # (None: the whole tensor, whose chunks are plain ranges of the result.)
    size = flat.size if box is None else math.prod(box)
    wide = np.complex128 if dtype.name.startswith("complex") else np.float64
    # A box's chunks land by index arrays (a few int64 per element): smaller chunks keep them in bounds.
    step = max(1, min(_CHUNK_ELEMENTS if box is None else _CHUNK_ELEMENTS // 4, size))
    # Three chunk buffers, shared by the inputs: no allocation per chunk.
    raw, term, acc = np.empty(step, dtype.numpy), np.empty(step, wide), np.empty(step, wide)
    for start in range(0, size, step):
        n = min(step, size - start)
        total = _weighted_sum(streams, factors, start, raw[:n], term[:n], acc[:n])
        if box is None or lows is None:
            flat[start : start + n] = total
        else:
            local = np.unravel_index(np.arange(start, start + n), box)
            flat[np.ravel_multi_index(tuple(i + lo for i, lo in zip(local, lows)), result.shape)] = total
    for stream in streams:
        stream.done()


def _mean_chunks(streams: list[_Stream], factors: list[float]) -> Iterator[memoryview]:
    """The weighted mean of ``streams`` (inputs stored whole) in its own dtype, a chunk at a time,
    for :meth:`~trackpoint._format.bundle_writer.BundleWriter.add_chunks`: the same values
    :func:`_accumulate` puts in a whole result, with no buffer larger than a chunk. Each input's
    checksum is verified after its last chunk."""
    dtype = streams[0].dtype
    size = math.prod(streams[0].entry.shape)
    wide = np.complex128 if dtype.name.startswith("complex") else np.float64
    step = max(1, min(_CHUNK_ELEMENTS, size))
    raw, term, acc = np.empty(step, dtype.numpy), np.empty(step, wide), np.empty(step, wide)
    # The mean goes out in chunks of several steps: fewer, larger writes, which go to the file
    # without passing through the writer's buffer.
    out = np.empty(max(step, min(_chunk_copy.CHUNK_BYTES // dtype.itemsize, size)), dtype.numpy)
    filled = 0
    for start in range(0, size, step):
        n = min(step, size - start)
        out[filled : filled + n] = _weighted_sum(streams, factors, start, raw[:n], term[:n], acc[:n])
        filled += n
        if filled + step > len(out) or start + n == size:
            yield numeric_bytes_view(out[:filled])
            filled = 0
    for stream in streams:
        stream.done()


def _weighted_sum(
    streams: list[_Stream], factors: list[float], start: int, raw: np.ndarray, term: np.ndarray, total: np.ndarray
) -> np.ndarray:
    """``total`` set to the weighted sum of the inputs' elements ``start:start + len(total)``,
    each read into ``raw`` and widened into ``term`` (all three of the chunk's length)."""
    total.fill(0)
    for stream, factor in zip(streams, factors):
        # Widened and weighted in one pass (dtype=: a float16 times a Python float is otherwise float16).
        # inf + -inf (or inf * a zero weight) is nan, which is the mean's value: no warning about it.
        with np.errstate(invalid="ignore", over="ignore"):
            np.multiply(stream.chunk(start, start + len(total), raw), factor, out=term, dtype=total.dtype)
            total += term
    return total


def _pieces(bundle: BundleReader, entry: Entry, dtype: DType) -> dict[tuple[tuple[int, int], ...], Entry]:
    """``{bounds: stored piece}`` of a tensor: itself whole, or its slices, each checked as the reader
    checks them (inside the tensor, disjoint, covering it, each piece of the tensor's dtype and its
    box's shape, inside its file) before anything is read."""
    whole = tuple((0, dim) for dim in entry.shape)
    if not entry.is_sliced:
        return {whole: entry}
    where = f"{bundle.index_path}: key {readable_key(entry.key)!r}"
    found: dict[tuple[tuple[int, int], ...], Entry] = {}
    for proto in entry.slices:
        extents = slices.extents_from_proto(proto)
        try:
            bounds = slices.resolve(extents, entry.shape, where)
        except InvalidArgumentError as exc:
            raise DataLossError(str(exc), path=bundle.index_path, key=entry.key) from exc
        part_key = slices.encode_slice_key(entry.key, extents)
        expected = tuple(stop - start for start, stop in bounds)
        part = bundle.entry(part_key) if part_key in bundle else None
        if part is None or part.dtype_enum != entry.dtype_enum or part.shape != expected or part.is_sliced:
            raise DataLossError(
                f"{where}: slice {list(bounds)} is missing or stored as other than {dtype.enum_name}{list(expected)}; "
                "the checkpoint is damaged (`trackpoint verify` it)",
                path=bundle.index_path,
                key=entry.key,
            )
        bundle.checked(part)
        found[bounds] = part
    if sum(slices.volume(b) for b in found) != math.prod(entry.shape) or len(found) != len(entry.slices):
        raise DataLossError(
            f"{where}: its slices do not cover it exactly (overlapping or incomplete); the checkpoint is damaged "
            "or a shard's index was lost",
            path=bundle.index_path,
            key=entry.key,
        )
    check_disjoint(list(found), entry.key, bundle.index_path)
    return dict(sorted(found.items()))


class _Stream:
    """One input tensor read in element ranges, in order, its checksum verified at the end."""

    def __init__(self, bundle: BundleReader, entry: Entry, dtype: DType, whole: bool = False) -> None:
        self.entry, self.dtype = entry, dtype
        self.whole: np.ndarray | None = None
        if whole and (entry.is_sliced or bundle.big_endian):
            self.whole = np.asarray(bundle.read(entry.key)).reshape(-1)  # assembled, byte order fixed
            return
        bundle.checked(entry)  # offset and size inside the file, before anything is read
        self.stream = StoredStream(bundle, entry)

    def chunk(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """Elements ``start:stop`` (following the last chunk's) read into ``out``, unless read whole."""
        if self.whole is not None:
            return self.whole[start:stop]
        self.stream.read_into(numeric_bytes_view(out) if out.size else memoryview(b""))
        return out

    def done(self) -> None:
        if self.whole is None:
            self.stream.verify()
