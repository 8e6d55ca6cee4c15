"""Reading one stored tensor in bounded chunks into a reused buffer, its crc32c verified at its end.

For a tool that copies, casts or averages a tensor and writes it out as it goes (see
:mod:`.chunked_write`): memory holds one chunk, never the tensor. The checksum is extended over
each chunk as it is read (``crc32c(chunk, value=crc)``) and compared after the last one, so
damage is reported only once every chunk has been handed out; the caller must publish nothing
until the iteration ends (a tool's bundle is all or nothing). The error is the one a whole read
raises.

Example:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.arange(5, dtype=np.int32)})
    >>> with BundleReader(prefix) as bundle:
    ...     [len(chunk) for chunk in stored_chunks(bundle, bundle.entry("w"), memoryview(bytearray(10)), 4)]
    [8, 8, 4]
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from trackpoint._format.bundle_reader import BundleReader, Entry
from trackpoint._format.crc import crc32c, unmask
from trackpoint.errors import InvalidArgumentError

__all__ = ["stored_chunks"]


def stored_chunks(bundle: BundleReader, entry: Entry, scratch: memoryview, align: int = 1) -> Iterator[memoryview]:
    """The stored bytes of ``entry`` (stored whole, and passed ``bundle.checked``) in consecutive
    chunks read into ``scratch``, each as many bytes as fit and are a multiple of ``align`` (an
    element's size, so that every chunk holds whole elements), the last one the rest. Each chunk
    is valid until the next is asked for.

    Raises:
        DataLossError: The file ends early, or the bytes fail their checksum (after the last chunk).
        InvalidArgumentError: ``scratch`` cannot hold one ``align``-byte element.
    """
    step = len(scratch) - len(scratch) % align
    if step <= 0:
        raise InvalidArgumentError(f"a scratch buffer of {len(scratch)} bytes holds no element of {align} bytes")
    fd = bundle.entry_fd(entry)
    crc = done = 0
    while done < entry.size:
        want = min(step, entry.size - done)
        got = 0
        while got < want:  # pread may return less than asked (a signal, a network filesystem)
            n = os.preadv(fd, [scratch[got:want]], entry.offset + done + got)
            if n <= 0:
                raise bundle.ended_early(entry.shard_id, entry.key)
            got += n
        chunk = scratch[:want]
        crc = crc32c(chunk, crc)
        done += want
        yield chunk
    if crc != unmask(entry.crc32c):
        raise bundle.checksum_mismatch(entry.shard_id, entry.key)
