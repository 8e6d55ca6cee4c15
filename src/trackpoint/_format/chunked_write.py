"""Appending one tensor to a data file from its bytes in chunks, checksummed as they are written.

A tool that copies, casts or averages a large tensor produces it a bounded chunk at a time into
one reused buffer; :func:`add_chunks` writes each chunk and extends the entry's crc32c over it
(``crc32c(chunk, value=crc)``), so no buffer as large as the tensor is ever allocated (a fresh
one per tensor, advised for huge pages by numpy, made the kernel compact memory: issue 39). The
entry is the row :meth:`~trackpoint._format.bundle_writer.ShardWriter.add_many` records for the
whole array, so the index is byte for byte the same.

Examples:
    >>> import numpy as np, os, tempfile
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_writer import BundleWriter
    >>> from trackpoint._format.dtypes import from_numpy
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> writer = BundleWriter(prefix)
    >>> values = np.arange(6, dtype=np.int32)
    >>> chunks = (memoryview(values[i : i + 4]).cast("B") for i in range(0, 6, 4))
    >>> writer.add_chunks("x", from_numpy(values.dtype), (6,), chunks); writer.finish()
    >>> tp.load_variable(prefix, "x")
    array([0, 1, 2, 3, 4, 5], dtype=int32)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from trackpoint._format.dtypes import DType
from trackpoint._format.index_entries import entry_head
from trackpoint._format.keys import encode_key
from trackpoint.errors import InvalidArgumentError

if TYPE_CHECKING:
    from trackpoint._format.bundle_writer import ShardWriter

__all__ = ["add_chunks"]


def add_chunks(shard: ShardWriter, key: str, dtype: DType, shape: Sequence[int], chunks: Iterable[memoryview]) -> None:
    """Append the numeric tensor ``key`` to ``shard`` from its bytes (native byte order) in
    consecutive chunks; a chunk's memory may be reused once the next is asked for.

    If ``chunks`` raises (a source that fails its checksum at its end), the bytes written so far
    stay in the data file without an entry: the caller aborts the bundle, publishing nothing.

    Raises:
        InvalidArgumentError: A string dtype, a key stored in slices in this shard, or chunks
            that do not add up to the tensor's size.
    """
    shape = tuple(int(d) for d in shape)
    size = math.prod(shape) * dtype.itemsize
    if dtype.is_string or (shard.sliced and encode_key(key) in shard.sliced):
        raise InvalidArgumentError(
            f"{shard.path}: {key!r} cannot be added in chunks: it is a string tensor or stored in slices",
            path=shard.path,
            key=key,
        )
    start, crc = shard.offset, 0
    for chunk in chunks:
        crc = shard.append(chunk, crc)[2]
    if shard.offset - start != size:
        raise InvalidArgumentError(
            f"{shard.path}: {key!r} is {dtype.name}{list(shape)}, {size} bytes, but {shard.offset - start} were given",
            path=shard.path,
            key=key,
        )
    # A key given twice is found when the index is built, as add_many's are.
    entries = shard.entries
    entries.names.append(key)
    entries.heads.append(entry_head(dtype.enum, shape))
    entries.shard_ids.append(shard.shard_id)
    entries.offsets.append(start)
    entries.sizes.append(size)
    entries.crcs.append(crc)
