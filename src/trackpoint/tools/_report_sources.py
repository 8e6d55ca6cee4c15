"""The inputs of ``trackpoint report``: a TF checkpoint or safetensors weights, and their tensors'
values, a chunk at a time (whole, or a range of elements, one range per thread) or many small
tensors at once.

A TF checkpoint is given by its prefix, one of its files, or a directory with a ``checkpoint``
file; safetensors weights by a file, an index or their directory. Reads verify checksums as the
rest of trackpoint does: a range read's crc32c is kept, and :meth:`Input.verify` combines those
of all ranges once the tensor was read.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> path = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.arange(6.0)})
    >>> source = open_input(path)
    >>> [chunk.tolist() for chunk in source.chunks("w", 1, 2, 5)], source.tensors["w"].params
    ([[2.0, 3.0, 4.0]], 6)
    >>> source.verify("w")  # only part of it read: its checksum cannot match
    Traceback (most recent call last):
    ...
    trackpoint.errors.DataLossError: ...
    >>> source.close()
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

import trackpoint as tp
from trackpoint._io import (
    FLOAT_NAMES,
    OBJECT_GRAPH_KEY,
    BundleReader,
    Entry,
    StoredStream,
    file_prefix,
    resolve_prefix,
    verify_parts,
)
from trackpoint.tools import _chunk_copy
from trackpoint.tools._hf_layout import SafetensorsSource, is_safetensors_path
from trackpoint.tools._to_tf import safetensors_chunks

__all__ = ["PARTS", "Input", "SafetensorsInput", "TFInput", "Tensor", "open_input"]

#: Ranges of one tensor read at once, each into a chunk buffer of its own.
PARTS = 2


def _numeric(dtype: np.dtype) -> bool:
    """Whether the report has statistics for ``dtype``: ints, bools and floats (ml_dtypes' bfloat16
    and float8 types included, whose numpy kind is 'V'); not strings, not complex."""
    return dtype.kind in "iufb" or dtype.name in FLOAT_NAMES


@dataclass(frozen=True)
class Tensor:
    key: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    numeric: bool  # statistics apply (not strings, not complex)

    @property
    def params(self) -> int:
        return math.prod(self.shape)


class Input:
    """One input: its tensors (key order), and each one's values a chunk at a time, whole or in parts."""

    kind = ""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tensors: dict[str, Tensor] = {}
        # One chunk buffer per part read at once: a part's chunks are only ever in its own.
        self._memory = [bytearray(_chunk_copy.CHUNK_BYTES) for _ in range(PARTS)]

    def splits(self, key: str) -> bool:
        """Whether ``key`` may be read in parts (:meth:`chunks` with a range), a part per thread."""
        raise NotImplementedError

    def chunks(self, key: str, part: int = 0, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        """The values of ``key`` (elements ``start`` to ``stop``, by default all) a chunk at a time,
        each valid until the next; ``part`` (below :data:`PARTS`) names the buffer they are read into,
        one per thread. Call :meth:`verify` once every part was read."""
        raise NotImplementedError

    def values(self, keys: list[str]) -> Iterator[np.ndarray]:
        """The values of ``keys`` (small numeric tensors), each whole, in order."""
        raise NotImplementedError

    def verify(self, key: str) -> None:
        """Check the bytes of ``key`` that :meth:`chunks` read (all of them, by now) against their checksum.

        Raises:
            DataLossError: They fail it.
        """

    def close(self) -> None:
        raise NotImplementedError


class TFInput(Input):
    kind = "tf"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.reader = BundleReader(path)
        self.graph = False
        self._entries: dict[str, Entry] = {}
        self._streams: dict[str, dict[int, StoredStream]] = {}  # key -> part start -> its stream
        for entry in self.reader.entries():
            if entry.key == OBJECT_GRAPH_KEY:
                self.graph = True
                continue
            dtype = entry.dtype
            numeric = dtype is not None and not dtype.is_string and _numeric(dtype.numpy)
            name = dtype.name if dtype is not None else f"dtype{entry.dtype_enum}"
            size = math.prod(entry.shape) * dtype.numpy.itemsize if numeric and dtype is not None else entry.size
            self.tensors[entry.key] = Tensor(entry.key, name, tuple(entry.shape), size, numeric)
            self._entries[entry.key] = entry

    def splits(self, key: str) -> bool:
        entry = self._entries[key]  # decoded with the others in __init__
        self.reader.checked(entry)
        return not entry.is_sliced

    def chunks(self, key: str, part: int = 0, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        entry = self._entries[key]
        dtype = self.reader.checked(entry)
        if entry.is_sliced:  # its slices read and put together (checksums verified), handed out in chunks
            assert start == 0 and stop in (None, math.prod(entry.shape)), "a sliced tensor is not split (see splits)"
            whole = np.asarray(self.reader.read(key)).reshape(-1)
            step = max(1, len(self._memory[part]) // whole.itemsize)  # so the statistics' memory stays a chunk's
            for first in range(0, whole.size, step):
                yield whole[first : first + step]
            return
        size = dtype.itemsize
        stop = entry.size // size if stop is None else stop
        stream = StoredStream(self.reader, entry, start * size)
        self._streams.setdefault(key, {})[start] = stream
        for piece in stream.chunks(memoryview(self._memory[part]), (stop - start) * size, size):
            values = np.frombuffer(piece, dtype.numpy)
            if self.reader.big_endian:
                values.byteswap(inplace=True)  # the chunk is this source's own memory
            yield values

    def values(self, keys: list[str]) -> Iterator[np.ndarray]:
        for batch in self.reader.read_batches(keys, _chunk_copy.CHUNK_BYTES):  # checksums verified
            for value in batch:
                yield np.asarray(value)

    def verify(self, key: str) -> None:
        streams = self._streams.pop(key, None)
        if streams:
            verify_parts([streams[start] for start in sorted(streams)])

    def close(self) -> None:
        self.reader.close()


class SafetensorsInput(Input):
    kind = "safetensors"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.source = SafetensorsSource(path)
        for name in sorted(self.source.where):
            info = self.source.where[name].tensors[name]
            self.tensors[name] = Tensor(name, str(info.dtype), info.shape, info.nbytes, _numeric(info.dtype))

    def splits(self, key: str) -> bool:
        return True

    def chunks(self, key: str, part: int = 0, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        opened = self.source.where[key]
        dtype = opened.tensors[key].dtype
        for piece in safetensors_chunks(opened, key, self._memory[part], start, stop):  # as the converter reads them
            yield np.frombuffer(piece, dtype)

    def values(self, keys: list[str]) -> Iterator[np.ndarray]:
        for key in keys:
            yield self.source.where[key].read(key)

    def close(self) -> None:
        self.source.close()


def open_input(path: str) -> Input:
    """The input at ``path``: safetensors weights, or a TF checkpoint given by its prefix, one of
    its files, or a directory with a ``checkpoint`` file."""
    if is_safetensors_path(path):
        return SafetensorsInput(path)
    try:
        return TFInput(resolve_prefix(path))
    except tp.errors.NotFoundError:
        stripped = file_prefix(path)
        if stripped is None:
            raise
        return TFInput(resolve_prefix(stripped))
