"""A TF checkpoint tensor's stored bytes, read in 1 MiB pieces with its checksum verified at the end.

A plain numeric little-endian tensor is stored as the same row-major little-endian bytes a
safetensors file holds, so converting it needs no array at all: each piece read from the data
file is written straight out, and the crc32c is computed along the way. Small sequential pieces
let the kernel's readahead and writeback overlap the disk's reads and writes, which one read and
one write of a whole large tensor do not (measured with benchmarks/convert.py). A tensor whose
checksum fails raises after its bytes went out; the caller's destination is never published then.

Sliced, string and big-endian tensors are not streamed (:func:`streamable` says so); the caller
reads them whole.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.arange(3, dtype=np.int32)})
    >>> with BundleReader(prefix) as bundle:
    ...     b"".join(bytes(piece) for piece in stored_pieces(bundle, bundle.entry("w")))
    b'\\x00\\x00\\x00\\x00\\x01\\x00\\x00\\x00\\x02\\x00\\x00\\x00'
"""

from __future__ import annotations

from collections.abc import Iterator

from trackpoint._io import BundleReader, Entry, stored_chunks

__all__ = ["PIECE_BYTES", "stored_pieces", "streamable"]

PIECE_BYTES = 1 << 20


def streamable(bundle: BundleReader, entry: Entry) -> bool:
    """Whether ``entry``'s stored bytes are its values as safetensors stores them.

    Also checks the entry against its data file first (size, range, dtype), raising as a read would.
    """
    dtype = bundle.checked(entry)
    return not (entry.is_sliced or dtype.is_string or bundle.big_endian)


def stored_pieces(bundle: BundleReader, entry: Entry, piece_bytes: int = PIECE_BYTES) -> Iterator[memoryview]:
    """The stored bytes of a :func:`streamable` ``entry``, piece by piece (each view valid until the next).

    Raises:
        DataLossError: The file ends early, or the bytes fail their checksum (after the last piece).
    """
    yield from stored_chunks(bundle, entry, memoryview(bytearray(min(piece_bytes, max(entry.size, 1)))))
