"""Reading one stored tensor's bytes, its crc32c verified: whole, in parallel parts, or in chunks.

:func:`read_stored` reads a tensor whole into one buffer (a large one in parts, one per thread:
file reads and crc32c both release the GIL, so the parts proceed at once on several cores, each
thread checksumming the cache-sized chunk it has just read; the parts' crcs are then combined,
and no memory is used beyond the destination).

For a tool that copies, casts or averages a tensor and writes it out as it goes (see
:mod:`.chunked_write`), :func:`stored_chunks` and :class:`StoredStream` read it in consecutive
chunks: memory holds one chunk, never the tensor. Streams that start where the last ends read a
tensor in parts at once (``trackpoint report`` does, a part per thread), and
:func:`verify_parts` checks their combined crc. The checksum is extended over each chunk as it
is read (``crc32c(chunk, value=crc)``) and compared after the last one, so damage is reported
only once every chunk has been handed out; the caller must publish nothing until then (a tool's
bundle is all or nothing). The error is the one a whole read raises.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.arange(5, dtype=np.int32)})
    >>> with BundleReader(prefix) as bundle:
    ...     [len(chunk) for chunk in stored_chunks(bundle, bundle.entry("w"), memoryview(bytearray(10)), 4)]
    [8, 8, 4]
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from trackpoint._format.crc import crc32c, crc32c_combine, unmask
from trackpoint._format.entries import Entry
from trackpoint._format.pread import Ended, read_into
from trackpoint._format.threads import parallel_map
from trackpoint.errors import InvalidArgumentError

if TYPE_CHECKING:
    from trackpoint._format.bundle_reader import BundleReader

__all__ = ["StoredStream", "read_stored", "stored_chunks", "verify_parts"]


def read_stored(reader: BundleReader, entry: Entry, dest: memoryview | None = None, verify: bool = True) -> memoryview:
    """The stored bytes of an entry that passed ``reader.checked`` (read into ``dest`` if given), crc verified.

    String tensors pass ``verify=False``: their crc is not over the stored bytes but over
    the lengths as fixed-width integers, so :func:`.tensors.decode_strings` checks it.

    Raises:
        DataLossError: The data file ends early, or (with ``verify``) the bytes fail their checksum.
    """
    fd = reader.entry_fd(entry)
    size = entry.size
    buf = dest if dest is not None else memoryview(bytearray(size))
    ended = functools.partial(reader.ended_early, entry.shard_id, entry.key)
    if verify and size >= 2 * reader.tuning.chunk_bytes:
        crc = _read_parallel(reader, fd, entry, buf, ended)
    else:
        read_into(fd, buf[:size], entry.offset, ended)
        crc = crc32c(buf) if verify else 0
    if verify and crc != unmask(entry.crc32c):
        raise reader.checksum_mismatch(entry.shard_id, entry.key)
    return buf


def _read_parallel(reader: BundleReader, fd: int, entry: Entry, buf: memoryview, ended: Ended) -> int:
    """Read a large tensor with several threads, each checksumming its own part; return the crc."""
    size, chunk_bytes = entry.size, reader.tuning.chunk_bytes
    parts = min(reader.tuning.read_threads, max(1, size // chunk_bytes))
    step = -(-size // parts)

    def read_part(start: int) -> int:
        stop = min(start + step, size)
        crc = 0
        for chunk in range(start, stop, chunk_bytes):
            piece = buf[chunk : min(chunk + chunk_bytes, stop)]
            read_into(fd, piece, entry.offset + chunk, ended)
            crc = crc32c(piece, crc)
        return crc

    starts = list(range(0, size, step))
    crcs = parallel_map(read_part, starts, len(starts))
    crc = crcs[0]
    for start, part_crc in zip(starts[1:], crcs[1:]):
        crc = crc32c_combine(crc, part_crc, min(start + step, size) - start)
    return crc


class StoredStream:
    """The stored bytes of one entry (stored whole, and passed ``reader.checked``), read in order
    into the caller's buffers, the checksum extended over each; :meth:`verify` after the last.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> from trackpoint._format.bundle_reader import BundleReader
        >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.arange(3, dtype=np.int8)})
        >>> with BundleReader(prefix) as bundle:
        ...     stream, buf = StoredStream(bundle, bundle.entry("w")), memoryview(bytearray(2))
        ...     parts = [bytes(stream.read_into(buf)), bytes(stream.read_into(buf[:1]))]
        ...     stream.verify()
        >>> parts
        [b'\\x00\\x01', b'\\x02']
    """

    def __init__(self, reader: BundleReader, entry: Entry, start: int = 0) -> None:
        self.reader, self.entry = reader, entry
        self.fd = reader.entry_fd(entry)
        self.start = start  # where in the stored bytes this stream begins (a part's start)
        self.done = 0  # bytes read so far
        self.crc = 0  # of those bytes
        self._ended = functools.partial(reader.ended_early, entry.shard_id, entry.key)

    def read_into(self, buf: memoryview) -> memoryview:
        """Fill ``buf`` with the next ``len(buf)`` stored bytes; return it.

        Raises:
            DataLossError: The data file ends early.
        """
        read_into(self.fd, buf, self.entry.offset + self.start + self.done, self._ended)
        self.crc = crc32c(buf, self.crc)
        self.done += len(buf)
        return buf

    def chunks(self, scratch: memoryview, length: int, align: int = 1) -> Iterator[memoryview]:
        """The next ``length`` bytes in consecutive chunks read into ``scratch``, as :func:`stored_chunks`.

        Raises:
            DataLossError: The data file ends early.
            InvalidArgumentError: ``scratch`` cannot hold one ``align``-byte element.
        """
        step = len(scratch) - len(scratch) % align
        if step <= 0:
            raise InvalidArgumentError(f"a scratch buffer of {len(scratch)} bytes holds no element of {align} bytes")
        end = self.done + length
        while self.done < end:
            yield self.read_into(scratch[: min(step, end - self.done)])

    def verify(self) -> None:
        """Check the bytes read (all of the entry's, by now, from its start) against the entry's checksum.

        Raises:
            DataLossError: They fail it.
        """
        verify_parts([self])


def verify_parts(parts: Sequence[StoredStream]) -> None:
    """Check the bytes that consecutive streams of one entry read (all of its bytes, by now, in
    parts read at once on several threads) against the entry's checksum: their crcs combined.

    Raises:
        DataLossError: They fail it.
    """
    reader, entry = parts[0].reader, parts[0].entry
    crc = parts[0].crc
    for part in parts[1:]:
        crc = crc32c_combine(crc, part.crc, part.done)
    whole = parts[0].start == 0 and all(a.start + a.done == b.start for a, b in itertools.pairwise(parts))
    if not (whole and parts[-1].start + parts[-1].done == entry.size) or crc != unmask(entry.crc32c):
        raise reader.checksum_mismatch(entry.shard_id, entry.key)  # bytes missing are bytes unverified


def stored_chunks(bundle: BundleReader, entry: Entry, scratch: memoryview, align: int = 1) -> Iterator[memoryview]:
    """The stored bytes of ``entry`` (stored whole, and passed ``bundle.checked``) in consecutive
    chunks read into ``scratch``, each as many bytes as fit and are a multiple of ``align`` (an
    element's size, so that every chunk holds whole elements), the last one the rest. Each chunk
    is valid until the next is asked for.

    Raises:
        DataLossError: The file ends early, or the bytes fail their checksum (after the last chunk).
        InvalidArgumentError: ``scratch`` cannot hold one ``align``-byte element.
    """
    stream = StoredStream(bundle, entry)
    yield from stream.chunks(scratch, entry.size, align)
    stream.verify()
