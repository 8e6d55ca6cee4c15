"""The safetensors file format: its dtypes, a file's layout, a strict reader (writer: :mod:`._safetensors_writer`).

A file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON (``{name: {"dtype",
"shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``, padded with spaces to a
multiple of 8), then the tensors' bytes: row-major, little-endian, packed with no gaps, offsets
relative to the end of the header. The official writer orders tensors by dtype, widest
first, then by name; :func:`plan_layout` does the same, so a file written here holds the bytes
``safetensors.torch.save_file`` writes for the same tensors.

The ``safetensors`` package is not used: its writer takes every tensor in memory at once and its
numpy binding has no bfloat16. bfloat16 and float8 come from ``ml_dtypes``.

Nothing in a file is trusted: :class:`SafetensorsFile` checks the whole header (length, JSON,
dtypes, shapes, offsets in order, contiguous, inside the file, matching dtype × shape, names
unique) before it reads or allocates anything.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from trackpoint._io import bounded_json, open_regular, read_bytes, read_into, start_readahead
from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = [
    "DTYPE_NAMES",
    "SafetensorsFile",
    "TensorInfo",
    "plan_layout",
    "safetensors_dtype",
]

# Widest first, as the official writer orders tensors (its Dtype enum, compared descending).
_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64"]
_ORDER += ["F64", "I64", "U64"]
DTYPE_NAMES: dict[str, np.dtype] = {
    "BOOL": np.dtype(bool),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "C64": np.dtype("<c8"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
}
_BY_NUMPY = {dtype: name for name, dtype in DTYPE_NAMES.items()}
_RANK = {name: rank for rank, name in enumerate(_ORDER)}
# The official reader refuses headers above 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000
# No real tensor comes near these; beyond them numpy (or the shape arithmetic of a transpose or a
# TF entry) fails with a raw ValueError, so a header claiming more is refused as hostile.
MAX_RANK = 64
METADATA_KEY = "__metadata__"
_MAX_BYTES = (1 << 63) - 1  # numpy's limit on an array's size in bytes (np.intp)


def safetensors_dtype(dtype: np.dtype) -> str | None:
    """The safetensors dtype name of a numpy dtype (``"F32"``, ``"BF16"``, ...), or None if it has none.

    Examples:
        >>> import ml_dtypes, numpy as np
        >>> safetensors_dtype(np.dtype(ml_dtypes.bfloat16)), safetensors_dtype(np.dtype(object))
        ('BF16', None)
    """
    return _BY_NUMPY.get(np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).byteorder == ">" else np.dtype(dtype))


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors file, as its header describes it.

    Attributes:
        name: The tensor's name.
        dtype: Its numpy dtype (little-endian).
        shape: Its shape.
        begin: Offset of its first byte from the start of the file.
        end: Offset just past its last byte.
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        """How many bytes the tensor takes."""
        return self.end - self.begin


def plan_layout(tensors: Iterable[tuple[str, np.dtype, Sequence[int]]]) -> list[TensorInfo]:
    """Where each tensor goes, in the official writer's order: widest dtype first, then by name.

    Offsets are relative to the data buffer (the header's length is not known yet).

    Raises:
        InvalidArgumentError: A dtype safetensors cannot hold, a name given twice, or the name ``__metadata__``.

    Examples:
        >>> import numpy as np
        >>> [(t.name, t.begin, t.end) for t in plan_layout([("b", np.dtype("i1"), (3,)), ("a", np.dtype("f4"), ())])]
        [('a', 0, 4), ('b', 4, 7)]
    """
    rows = []
    seen: set[str] = set()
    for name, dtype, shape in tensors:
        code = safetensors_dtype(dtype)
        if code is None:
            raise InvalidArgumentError(f"tensor {name!r}: dtype {dtype} cannot be stored in a safetensors file")
        if name in seen:
            raise InvalidArgumentError(f"tensor {name!r} is given twice")
        if name == METADATA_KEY:  # the header's own entry: a tensor under it makes a file no reader opens
            raise InvalidArgumentError(f"a tensor cannot be named {METADATA_KEY!r} in a safetensors file; rename it")
        seen.add(name)
        rows.append((code, name, tuple(int(d) for d in shape)))
    rows.sort(key=lambda row: (-_RANK[row[0]], row[1]))
    layout = []
    offset = 0
    for code, name, shape in rows:
        size = math.prod(shape) * DTYPE_NAMES[code].itemsize
        layout.append(TensorInfo(name, DTYPE_NAMES[code], shape, offset, offset + size))
        offset += size
    return layout


class SafetensorsFile:
    """An open safetensors file: its header checked in full, tensors read one at a time.

    Args:
        path: The file.

    Raises:
        NotFoundError: No such file.
        InvalidArgumentError: ``path`` is not a regular file (a FIFO, a device, a directory).
        DataLossError: The header is damaged or hostile: its length beyond the file, not
            JSON, an unknown dtype, offsets out of order, overlapping, leaving gaps, out of
            range or not matching dtype × shape, a name given twice.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> from trackpoint.tools._safetensors_writer import SafetensorsWriter
        >>> path = os.path.join(tempfile.mkdtemp(), "x.safetensors")
        >>> with SafetensorsWriter(path, [("a", np.dtype("i8"), (3,))]) as w:
        ...     w.write("a", np.arange(3))
        >>> with SafetensorsFile(path) as f:
        ...     list(f.tensors), f.tensors["a"].shape
        (['a'], (3,))
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        # Non-blocking, regular files only: a FIFO at the path would block the open forever.
        self._fd, info = open_regular(path, "safetensors file")
        try:
            self.size = info.st_size
            self.metadata, self.tensors = self._parse_header()
        except BaseException:
            self.close()
            raise

    def _damaged(self, message: str, key: str | None = None) -> DataLossError:
        return DataLossError(
            f"{self.path}: {message}; the file is damaged or not a safetensors file", path=self.path, key=key
        )

    def _pread(self, size: int, offset: int) -> bytes:
        assert self._fd is not None
        return read_bytes(self._fd, size, offset, lambda at: self._damaged(f"unexpected end of file at byte {at}"))

    def _parse_header(self) -> tuple[dict[str, str], dict[str, TensorInfo]]:
        if self.size < 8:
            raise self._damaged(f"only {self.size} bytes, fewer than the 8-byte header length")
        (length,) = struct.unpack("<Q", self._pread(8, 0))
        if length > MAX_HEADER_BYTES or 8 + length > self.size:
            raise self._damaged(
                f"header length {length} reaches beyond the file's {self.size} bytes or the 100 MB limit"
            )
        raw = self._pread(length, 8)
        try:
            doc = bounded_json.loads(raw.decode("utf-8"), "header", object_pairs_hook=_refuse_duplicates)
        except InvalidArgumentError:  # arrays nested thousands deep: no header needs more than three levels
            raise self._damaged(
                f"header nests JSON too deeply (more than {bounded_json.MAX_JSON_DEPTH} levels)"
            ) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._damaged(f"header is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise self._damaged("header is not a JSON object")
        metadata = doc.pop(METADATA_KEY, None)
        metadata = {} if metadata is None else metadata  # null is what the official reader accepts; [] is not
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise self._damaged("__metadata__ is not a map of str to str")
        base = 8 + length
        tensors = [self._tensor(name, spec, base) for name, spec in doc.items()]
        position = base
        for info in sorted(tensors, key=lambda t: (t.begin, t.end)):
            if info.begin != position:
                problem = "overlaps the tensor before it" if info.begin < position else "leaves a gap before it"
                raise self._damaged(f"tensor {info.name!r} {problem} (offsets out of order or overlapping)", info.name)
            position = info.end
        if position != self.size:
            raise self._damaged(f"tensors end at byte {position} but the file has {self.size}")
        return metadata, {info.name: info for info in tensors}

    def _tensor(self, name: str, spec: object, base: int) -> TensorInfo:
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
            raise self._damaged(f"tensor {name!r}: entry is not {{dtype, shape, data_offsets}}", name)
        dtype = DTYPE_NAMES.get(spec["dtype"]) if isinstance(spec["dtype"], str) else None
        if dtype is None:
            raise self._damaged(f"tensor {name!r}: unknown or unsupported dtype {spec['dtype']!r}", name)
        shape, offsets = spec["shape"], spec["data_offsets"]
        problem = _shape_problem(shape, dtype) or self._offsets_problem(offsets, base)
        if problem is not None:
            raise self._damaged(f"tensor {name!r}: {problem}", name)
        begin, end = offsets
        if math.prod(shape) * dtype.itemsize != end - begin:
            raise self._damaged(
                f"tensor {name!r}: {spec['dtype']}{shape} needs {math.prod(shape) * dtype.itemsize} bytes, "
                f"data_offsets give {end - begin}",
                name,
            )
        return TensorInfo(name, dtype, tuple(shape), base + begin, base + end)

    def _offsets_problem(self, offsets: object, base: int) -> str | None:
        """What is wrong with a tensor's ``data_offsets`` (relative to ``base``, the data's start), if anything."""
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)):
            return f"data_offsets {offsets!r} are not two non-negative integers"
        begin, end = offsets
        if begin > end or base + end > self.size:
            return f"data_offsets {offsets} out of range of the file"
        return None

    def read(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """One tensor's values, into ``out`` when given (C-contiguous, of its dtype and shape).

        Raises:
            NotFoundError: No tensor of that name.
            InvalidArgumentError: ``out`` does not fit.
        """
        info = self.tensors.get(name)
        if info is None:
            raise NotFoundError(f"{self.path}: no tensor {name!r}", path=self.path, key=name)
        if out is None:
            out = np.empty(info.shape, info.dtype)
        elif out.dtype != info.dtype or out.shape != info.shape or not out.flags.c_contiguous:
            raise InvalidArgumentError(f"{self.path}: tensor {name!r} does not fit the given array", path=self.path)
        self._read_into(name, out, info.begin, info.nbytes)
        return out

    def read_rows(self, name: str, start: int, out: np.ndarray) -> np.ndarray:
        """Rows ``start`` to ``start + len(out)`` of a tensor of rank 1 or more, into ``out``.

        Lets a caller take a large tensor in bounded pieces (a transpose builds its result
        from them without a second whole copy).

        Raises:
            NotFoundError: No tensor of that name.
            InvalidArgumentError: A scalar, rows out of range, or ``out`` does not fit them.
        """
        info = self.tensors.get(name)
        if info is None:
            raise NotFoundError(f"{self.path}: no tensor {name!r}", path=self.path, key=name)
        count = out.shape[0] if out.ndim else 0
        if (
            not info.shape
            or out.ndim != len(info.shape)
            or out.dtype != info.dtype
            or out.shape[1:] != info.shape[1:]
            or not out.flags.c_contiguous
            or not 0 <= start <= start + count <= info.shape[0]
        ):
            raise InvalidArgumentError(
                f"{self.path}: rows {start}..{start + count} of tensor {name!r} do not fit the given array",
                path=self.path,
                key=name,
            )
        row_bytes = math.prod(info.shape[1:]) * info.dtype.itemsize
        self._read_into(name, out, info.begin + start * row_bytes, count * row_bytes)
        return out

    def read_flat(self, name: str, start: int, out: np.ndarray) -> np.ndarray:
        """Elements ``start`` to ``start + out.size`` of a tensor in row-major order, into the 1-D ``out``.

        For a piece smaller than one row (a transpose of a tensor whose rows are huge).

        Raises:
            NotFoundError: No tensor of that name.
            InvalidArgumentError: Elements out of range, or ``out`` is not a 1-D array of its dtype.
        """
        info = self.tensors.get(name)
        if info is None:
            raise NotFoundError(f"{self.path}: no tensor {name!r}", path=self.path, key=name)
        if out.ndim != 1 or out.dtype != info.dtype or not 0 <= start <= start + out.size <= math.prod(info.shape):
            raise InvalidArgumentError(
                f"{self.path}: elements {start}..{start + out.size} of tensor {name!r} do not fit the given array",
                path=self.path,
                key=name,
            )
        size = info.dtype.itemsize
        self._read_into(name, out, info.begin + start * size, out.size * size)
        return out

    def prefetch(self, name: str) -> None:
        """Let the disk start reading tensor ``name`` now, for a :meth:`read` of it soon (see
        :mod:`trackpoint._storage.readahead`); unknown names are ignored."""
        info = self.tensors.get(name)
        if info is not None and self._fd is not None:
            start_readahead(self._fd, info.begin, info.nbytes)

    def _read_into(self, name: str, out: np.ndarray, offset: int, size: int) -> None:
        if not size:
            return
        assert self._fd is not None
        view = out.reshape(-1).view(np.uint8).data
        read_into(self._fd, view[:size], offset, lambda _: self._damaged(f"tensor {name!r} is cut short", name))

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"name {key!r} appears twice")
        result[key] = value
    return result


def _shape_problem(shape: object, dtype: np.dtype) -> str | None:
    """What is wrong with a tensor's ``shape`` in a header, if anything."""
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return f"shape {shape!r} is not a list of non-negative integers"
    if len(shape) > MAX_RANK:
        return f"rank {len(shape)} is beyond the {MAX_RANK} any tensor has"
    # numpy multiplies the non-zero dimensions even of an empty array, and refuses past 2**63 bytes.
    if math.prod(d for d in shape if d) * dtype.itemsize > _MAX_BYTES:
        return f"shape {shape} is larger than any array can be"
    return None
