"""A data file written around the page cache (``O_DIRECT``), for the writer process of async saves.

A durable write through the page cache costs the writer's core far more than the copy it
looks like: 256 MiB took 0.27 s of system time here (the copy into the page cache 0.08 s, the
fsync's writeback the rest), against 0.03 s written with ``O_DIRECT``. Beside a training loop
on a 2-core machine that time is taken from the loop (PERFORMANCE.md, "Saves beside a
training loop"). ``O_DIRECT`` needs block-aligned memory, file offsets and lengths, which the
tensors of a TF data file are not (they are packed densely), so :class:`DirectFile` gathers
the bytes in an aligned buffer and writes whole aligned chunks of it: one more copy in user
space, and none of the page cache's work.

Only the writer process turns it on (:func:`write_around_page_cache`): a thread of the training
process keeps the page cache, from which a restore right after a save reads. Where the file
system refuses ``O_DIRECT`` (tmpfs, some network file systems), files are written as before.
"""

from __future__ import annotations

import errno
import fcntl
import io
import mmap
import os

import numpy as np

__all__ = ["ALIGN", "CHUNK", "DirectFile", "open_data_file", "write_around_page_cache"]

ALIGN = 4096  # the block size O_DIRECT needs, for memory, offsets and lengths (covers 512)
CHUNK = 8 << 20  # bytes gathered before each write
_BUFFER = 1 << 20  # the buffered file's: many small tensors otherwise cost a system call every 8 KiB

_enabled = False
# Buffers of closed files, for the next: a fresh 8 MiB mapping per file is 2,048 page faults and
# an unmap (23,000 faults in 6 s of back-to-back saves, traced for issue 44).
_spare: list[mmap.mmap] = []


def write_around_page_cache(enabled: bool) -> None:
    """Write the data files this process opens from now on with ``O_DIRECT`` (or not)."""
    global _enabled
    _enabled = enabled


class _Raw:
    """What ``BufferedWriter.raw`` is to its users here: closing it drops what is not written."""

    def __init__(self, owner: DirectFile) -> None:
        self._owner = owner

    def close(self) -> None:
        self._owner.discard()


class DirectFile:
    """The part of ``io.BufferedWriter`` that ``ShardWriter`` uses, over an ``O_DIRECT`` file.

    ``flush`` writes the partial last block padded, then cuts the file to its true length, and
    keeps the block: the next write completes it and writes it again.

    Examples:
        >>> import tempfile
        >>> path = tempfile.mkdtemp() + "/data"
        >>> try:
        ...     f = DirectFile(path)
        ... except OSError:  # a file system without O_DIRECT
        ...     f = None
        >>> if f is not None:
        ...     _ = f.write(b"x" * 5000); f.flush(); _ = f.write(b"y"); f.close()
        ...     assert open(path, "rb").read() == b"x" * 5000 + b"y"
    """

    def __init__(self, path: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_DIRECT
        self._fd = os.open(path, flags, 0o666)
        try:
            self._buffer = _spare.pop()
        except IndexError:
            self._buffer = mmap.mmap(-1, CHUNK)  # page-aligned
        self._view = memoryview(self._buffer)
        self._used = 0  # bytes of the buffer that hold data
        self._position = 0  # the file offset of the buffer's first byte (aligned)
        self._direct = True
        self.closed = False
        self.raw = _Raw(self)

    def fileno(self) -> int:
        return self._fd

    def write(self, data: bytes | memoryview | object) -> int:
        """Append ``data`` (any C-contiguous buffer; anything else raises ``ValueError``, writing nothing)."""
        if isinstance(data, np.ndarray):
            # Bytes of the array itself: a memoryview asks for its format, which the dtypes of
            # ml_dtypes (bfloat16, float8) do not give ("cannot include dtype 'E' in a buffer").
            if not data.flags.c_contiguous:
                raise ValueError("DirectFile.write takes a C-contiguous buffer")
            source = data.reshape(-1).view(np.uint8).data
        else:
            source = memoryview(data)  # type: ignore[arg-type]
            if not source.c_contiguous:
                raise ValueError("DirectFile.write takes a C-contiguous buffer")
            source = source.cast("B")
        done, total = 0, source.nbytes
        while done < total:
            take = min(total - done, CHUNK - self._used)
            self._view[self._used : self._used + take] = source[done : done + take]
            self._used += take
            done += take
            if self._used == CHUNK:
                self._write_out(CHUNK)
                self._position += CHUNK
                self._used = 0
        return total

    def _write_out(self, length: int) -> None:
        written = 0
        while written < length:
            try:
                written += os.pwrite(self._fd, self._view[written:length], self._position + written)
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self._direct:
                    raise
                # Opened with O_DIRECT but refused at the first write (some file systems):
                # the same file, through the page cache from here on.
                fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                self._direct = False

    def flush(self) -> None:
        """Write what is gathered (the last block padded) and cut the file to its true length."""
        if self._used:
            self._write_out(-(-self._used // ALIGN) * ALIGN)
            os.ftruncate(self._fd, self._position + self._used)

    def close(self) -> None:
        if not self.closed:
            try:
                self.flush()
            finally:
                self.discard()

    def discard(self) -> None:
        """Close without writing what is gathered."""
        if not self.closed:
            self.closed = True
            self._view.release()
            _spare.append(self._buffer)
            os.close(self._fd)


def open_data_file(path: str, staged: bool) -> io.BufferedWriter | DirectFile:
    """The file a shard's bytes are appended to: a :class:`DirectFile` when this process writes
    around the page cache (and ``path`` is no copy staged for an upload) and the file system
    takes ``O_DIRECT``, else a buffered file."""
    if _enabled and not staged and hasattr(os, "O_DIRECT"):
        try:
            return DirectFile(path)
        except OSError:  # EINVAL: no O_DIRECT here
            pass
    # Built by hand rather than by open(), whose declared type hides the raw file abort() closes.
    return io.BufferedWriter(io.FileIO(path, "wb"), _BUFFER)
