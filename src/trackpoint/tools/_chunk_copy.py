"""Copying one tensor into a new bundle a bounded chunk at a time, cast on the way if a rule says so.

``rewrite`` and ``average`` copy large tensors this way, through one :class:`Scratch` of two
chunk-sized buffers reused for every tensor: a chunk of the stored bytes is read into the first
(its crc32c extended as it comes, verified after the last chunk), put in native byte order, cast
into the second if asked, and handed to
:meth:`~trackpoint._format.bundle_writer.BundleWriter.add_chunks`, which writes it and extends
the new entry's crc32c. A buffer as large as the largest tensor (what they used) is a fresh
allocation numpy advises for huge pages, whose faults can stall in memory compaction (issue 39).

A checksum that fails is found after the tensor's last chunk was written; the tools' bundles are
published only when every tensor was written (:func:`.tensor_copy.new_bundle`), so nothing is.
Sliced, string and small tensors (see :func:`streams`) are read whole as before.

Examples:
    >>> import numpy as np, os, tempfile
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> from trackpoint._format.bundle_writer import BundleWriter
    >>> from trackpoint.tools._casting import target_dtype
    >>> d = tempfile.mkdtemp()
    >>> src = tp.save_tensors(os.path.join(d, "a"), {"w": np.arange(4, dtype=np.float32)})
    >>> with BundleReader(src) as bundle:
    ...     entry, half = bundle.entry("w"), target_dtype("float16", "w")
    ...     writer = BundleWriter(os.path.join(d, "b"))
    ...     chunks = Scratch().stored(bundle, entry, bundle.checked(entry), half, "w")
    ...     writer.add_chunks("w", half, entry.shape, chunks); writer.finish()
    >>> tp.load_variable(os.path.join(d, "b"), "w")
    array([0., 1., 2., 3.], dtype=float16)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from trackpoint._io import DEFAULT_TUNING, BundleReader, DType, Entry, stored_chunks
from trackpoint.tools._casting import cast_into

__all__ = ["CHUNK_BYTES", "STREAM_BYTES", "Scratch", "streams"]

# A chunk is checksummed while it is still in the CPU's cache (the reader's own chunk size).
CHUNK_BYTES = DEFAULT_TUNING.chunk_bytes
# Smaller tensors are read whole, as before: for them a chunk is the tensor, and the reader's
# whole read of many small tensors is the faster path.
STREAM_BYTES = DEFAULT_TUNING.parallel_read_bytes


def streams(entry: Entry, dtype: DType) -> bool:
    """Whether the tools copy ``entry`` (of ``dtype``, checked) in chunks: a numeric tensor stored
    whole, of at least :data:`STREAM_BYTES`."""
    return not (entry.is_sliced or dtype.is_string) and entry.size >= STREAM_BYTES


class Scratch:
    """The two chunk-sized buffers every copied tensor goes through: one a chunk is read into, one
    a cast writes into (each made when first needed)."""

    def __init__(self) -> None:
        self._read: memoryview | None = None
        self._cast: np.ndarray | None = None

    def stored(
        self, bundle: BundleReader, entry: Entry, dtype: DType, target: DType | None, key: str
    ) -> Iterator[memoryview]:
        """The values of ``entry`` (of ``dtype``, checked, stored whole), cast to ``target`` when
        given, as native bytes a chunk at a time (each valid until the next); ``key`` names the
        result in a refused cast's message.

        Raises:
            DataLossError: The data file ends early or the bytes fail their checksum (after the last chunk).
            InvalidArgumentError: The cast would lose a value (see :func:`.casting.cast_into`).
        """
        if self._read is None:
            self._read = memoryview(bytearray(CHUNK_BYTES))
        elements = CHUNK_BYTES // max(dtype.itemsize, target.itemsize if target is not None else 1)
        values = self._native(bundle, entry, dtype, self._read[: elements * dtype.itemsize])
        return self._as_bytes(values, target, key, bundle.prefix, entry.shape)

    def given(self, value: np.ndarray, target: DType, key: str, prefix: str) -> Iterator[memoryview]:
        """An array in memory (an added value) cast to ``target`` a chunk at a time, as :meth:`stored`."""
        flat = np.ascontiguousarray(value).reshape(-1)
        elements = CHUNK_BYTES // max(flat.dtype.itemsize, target.itemsize)
        chunks = (flat[start : start + elements] for start in range(0, flat.size, elements))
        return self._as_bytes(chunks, target, key, prefix, np.shape(value))

    @staticmethod
    def _native(bundle: BundleReader, entry: Entry, dtype: DType, memory: memoryview) -> Iterator[np.ndarray]:
        for chunk in stored_chunks(bundle, entry, memory, dtype.itemsize):
            values = np.frombuffer(chunk, dtype.numpy)
            if bundle.big_endian:
                values.byteswap(inplace=True)  # the chunk is this scratch's own memory
            yield values

    def _as_bytes(
        self, chunks: Iterator[np.ndarray], target: DType | None, key: str, prefix: str, shape: tuple[int, ...]
    ) -> Iterator[memoryview]:
        start = 0
        for values in chunks:
            if target is not None:
                if self._cast is None:
                    self._cast = np.empty(CHUNK_BYTES, np.uint8)
                out = self._cast[: values.size * target.itemsize].view(target.numpy)
                cast_into(values, out, key, prefix, start, shape)
                values = out
            start += values.size
            yield memoryview(values.view(np.uint8))  # type: ignore[arg-type]  # numpy types its buffer from 3.12
