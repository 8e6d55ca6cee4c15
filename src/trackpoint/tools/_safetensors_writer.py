"""Writing a safetensors file one tensor at a time, in the layout the official writer gives the same tensors.

The header is planned first (:func:`~trackpoint.tools._safetensors_format.plan_layout`), then each
tensor is written at its offset, in pieces, to a temporary file beside the destination, which is
fsynced and renamed into place by :meth:`SafetensorsWriter.finish` (or left for the caller to
publish with others, for a sharded layout).

Examples:
    >>> import numpy as np, tempfile, os
    >>> from trackpoint.tools._safetensors_format import SafetensorsFile
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> with SafetensorsWriter(path, [("w", np.dtype(np.float32), (2,))], {"format": "pt"}) as writer:
    ...     writer.write("w", np.array([1.5, 2.5], np.float32))
    >>> with SafetensorsFile(path) as f:
    ...     f.metadata, f.read("w")
    ({'format': 'pt'}, array([1.5, 2.5], dtype=float32))
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np

from trackpoint._io import WRITEBACK_BYTES, bounded_json, fsync_directory, remove_quietly, start_writeback, storage_for
from trackpoint._pipeline import write_remedy
from trackpoint.errors import InvalidArgumentError, WriteError
from trackpoint.tools._safetensors_format import MAX_HEADER_BYTES, TensorInfo, plan_layout, safetensors_dtype

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = ["SafetensorsWriter", "header_length"]

_CHUNK = 16 << 20  # bytes per copy when a tensor is not contiguous (a transpose): bounded extra memory
_WRITE_PIECE = 1 << 20


def _header_bytes(layout: Sequence[TensorInfo], metadata: Mapping[str, str] | None) -> bytes:
    doc: dict[str, object] = {}
    if metadata:
        doc["__metadata__"] = dict(metadata)
    for info in layout:
        doc[info.name] = {
            "dtype": safetensors_dtype(info.dtype),
            "shape": list(info.shape),
            "data_offsets": [info.begin, info.end],
        }
    text = bounded_json.dumps(doc, "the safetensors header", separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def header_length(
    tensors: Iterable[tuple[str, np.dtype, Sequence[int]]], metadata: Mapping[str, str] | None = None
) -> int:
    """The length of the JSON header (padding included) a file of ``tensors`` gets, as readers check it.

    Lets a caller planning several files refuse one too large before writing any.

    Examples:
        >>> header_length([("w", np.dtype(np.float32), (2,))])
        56
    """
    return len(_header_bytes(plan_layout(tensors), metadata)) - 8


def _check_header(path: str, length: int) -> None:
    if length > MAX_HEADER_BYTES:
        raise InvalidArgumentError(
            f"{path}: its safetensors header would take {length} bytes, more than the {MAX_HEADER_BYTES} that "
            "readers (the official library too) accept; put fewer tensors in each file (a smaller max_shard_size, "
            "--max-shard-size) or less metadata",
            path=path,
        )


class SafetensorsWriter:
    """Write one safetensors file whose tensors are known up front, one tensor at a time.

    The header is written first from ``tensors``' dtypes and shapes; each :meth:`write` then puts
    one tensor's bytes at its place (any order). Bytes go to a temporary file beside ``path``;
    :meth:`finish` checks every tensor was written, fsyncs and renames it into place, so a
    reader sees the old file or the whole new one. :meth:`abort` (or leaving a ``with`` block
    by an exception) removes the temporary file.

    Args:
        path: The final file name.
        tensors: ``(name, numpy dtype, shape)`` of every tensor the file will hold.
        metadata: The header's ``__metadata__`` (``str`` to ``str``), if any.
        publish: False leaves the finished file under its temporary name (:attr:`temp`) for
            the caller to rename, as a sharded write does once every shard is complete.

    Raises:
        InvalidArgumentError: A dtype safetensors cannot hold, a name given twice,
            metadata that is not ``str`` to ``str``, or a header beyond ``MAX_HEADER_BYTES``.
        WriteError: The temporary file cannot be created or written.
    """

    def __init__(
        self,
        path: str,
        tensors: Iterable[tuple[str, np.dtype, Sequence[int]]],
        metadata: Mapping[str, str] | None = None,
        publish: bool = True,
    ) -> None:
        if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise InvalidArgumentError(f"{path}: safetensors metadata must map str to str, got {dict(metadata)!r}")
        self.path = path
        self.layout = {info.name: info for info in plan_layout(tensors)}
        header = _header_bytes(list(self.layout.values()), metadata)
        _check_header(path, len(header) - 8)  # before the temporary file exists
        self._base = len(header)
        self._pending = set(self.layout)
        self._publish = publish
        self._unstarted = (0, 0)  # the written range whose writeback has not been started yet
        self.temp = storage_for(path).temp_path(path)
        try:
            self._fd: int | None = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise WriteError(f"{path}: cannot create {self.temp}: {exc}. {write_remedy(exc)}", path=path) from exc
        try:
            self._pwrite(memoryview(header), 0)
        except BaseException:
            self.abort()
            raise

    def _pwrite(self, data: memoryview, offset: int) -> None:
        assert self._fd is not None
        data = data.cast("B") if data.ndim != 1 or data.format != "B" else data
        done = 0
        while done < len(data):
            try:
                # Pieces of 1 MiB: one write of a whole large tensor measured 2-5x slower than the
                # same bytes in pieces, cold cache or warm (benchmarks/convert.py).
                n = os.pwrite(self._fd, data[done : done + _WRITE_PIECE], offset + done)
            except OSError as exc:
                raise WriteError(
                    f"{self.path}: writing {self.temp} failed: {exc}. {write_remedy(exc)}", path=self.path
                ) from exc
            self._written(offset + done, n)
            done += n

    def _written(self, offset: int, size: int) -> None:
        """Start the writeback of every ``WRITEBACK_BYTES`` written, across writes and tensors, so
        the disk works while the rest is read and the closing fsync has little left (as a bundle's
        shard writer does); a write that does not follow the last one starts what came before."""
        assert self._fd is not None
        start, stop = self._unstarted
        if offset != stop:
            if stop > start:
                start_writeback(self._fd, start, stop - start)
            start = offset
        stop = offset + size
        if stop - start >= WRITEBACK_BYTES:
            start_writeback(self._fd, start, stop - start)
            start = stop
        self._unstarted = (start, stop)

    def write(self, name: str, array: np.ndarray) -> None:
        """Write one tensor's values (any memory layout: a transposed view is written in chunks).

        Raises:
            InvalidArgumentError: ``name`` is not one of the planned tensors, was written
                already, or ``array``'s dtype or shape differ from the plan.
        """
        info = self.layout.get(name)
        if info is None or name not in self._pending:
            problem = "was written already" if info is not None else "is not among the tensors planned for it"
            raise InvalidArgumentError(f"{self.path}: tensor {name!r} {problem}", path=self.path, key=name)
        array = np.asarray(array)
        if array.dtype.newbyteorder("<") != info.dtype or array.shape != info.shape:
            raise InvalidArgumentError(
                f"{self.path}: tensor {name!r} is {array.dtype}{list(array.shape)}, planned as "
                f"{info.dtype}{list(info.shape)}",
                path=self.path,
                key=name,
            )
        offset = self._base + info.begin
        if array.dtype.byteorder == ">":
            array = array.astype(info.dtype)
        if array.flags.c_contiguous:
            if array.size:
                self._pwrite(array.reshape(-1).view(np.uint8).data, offset)
        else:
            rows = max(1, _CHUNK // max(1, array[0].nbytes if array.ndim else 1))
            for start in range(0, array.shape[0], rows):
                chunk = np.ascontiguousarray(array[start : start + rows])
                self._pwrite(chunk.reshape(-1).view(np.uint8).data, offset)
                offset += chunk.nbytes
        self._pending.discard(name)

    def write_pieces(self, name: str, pieces: Iterable[memoryview]) -> None:
        """Write one tensor from its raw little-endian bytes, given in consecutive pieces.

        Raises:
            InvalidArgumentError: ``name`` is not planned or was written, or the pieces do not
                add up to its size.
        """
        info = self.layout.get(name)
        if info is None or name not in self._pending:
            raise InvalidArgumentError(f"{self.path}: tensor {name!r} is not planned or was written", path=self.path)
        offset = self._base + info.begin
        for piece in pieces:
            if offset + len(piece) > self._base + info.end:
                break
            self._pwrite(piece, offset)
            offset += len(piece)
        if offset != self._base + info.end:
            raise InvalidArgumentError(
                f"{self.path}: tensor {name!r} got {offset - self._base - info.begin} of its {info.nbytes} bytes",
                path=self.path,
                key=name,
            )
        self._pending.discard(name)

    def finish(self) -> None:
        """Check every planned tensor was written, make the file durable and (with ``publish``) rename it.

        Raises:
            InvalidArgumentError: A planned tensor was never written (the file is removed).
        """
        try:
            if self._pending:
                missing = sorted(self._pending)
                raise InvalidArgumentError(f"{self.path}: tensors never written: {missing[:5]}", path=self.path)
            assert self._fd is not None
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            if self._publish:
                os.replace(self.temp, self.path)
                fsync_directory(os.path.dirname(self.path))
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Give up: close and remove the temporary file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        remove_quietly(self.temp)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.finish()
        else:
            self.abort()
