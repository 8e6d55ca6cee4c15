"""Reading exactly the bytes asked for at an offset of a file, whatever each ``pread`` returns.

``os.pread`` and ``os.preadv`` may return fewer bytes than asked (a signal, a network file
system, a file that shrank meanwhile), and 0 at the end of the file. Every read of a data file
goes through these functions, so the loop over short reads exists once, and a file that ends
early raises the caller's error, which names the file (and key): never a buffer half filled.

Examples:
    >>> import os, tempfile
    >>> from trackpoint.errors import DataLossError
    >>> path = os.path.join(tempfile.mkdtemp(), "f")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(b"0123456789")
    >>> fd = os.open(path, os.O_RDONLY)
    >>> buf = memoryview(bytearray(4))
    >>> read_into(fd, buf, 3, lambda at: DataLossError(f"{path}: ends at {at}")); bytes(buf)
    b'3456'
    >>> read_bytes(fd, 4, 8, lambda at: DataLossError(f"ends at byte {at}"))
    Traceback (most recent call last):
    ...
    trackpoint.errors.DataLossError: ends at byte 10
    >>> os.close(fd)
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["Ended", "read_bytes", "read_into", "read_into_all"]

#: Makes the error for a file that ends early, given the file offset where its bytes ran out.
Ended = Callable[[int], BaseException]

# Buffers one preadv call takes at most (Linux's IOV_MAX; the call fails with more).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def read_into(fd: int, buf: memoryview, offset: int, ended: Ended) -> None:
    """Fill ``buf`` with the bytes of ``fd`` from ``offset`` on.

    Raises:
        The error ``ended(position)`` makes: the file ends before ``buf`` is full.
    """
    done, size = 0, len(buf)
    while done < size:
        n = os.preadv(fd, [buf[done:]], offset + done)
        if n <= 0:
            raise ended(offset + done)
        done += n


def read_into_all(fd: int, buffers: list[memoryview], offset: int, ended: Ended) -> None:
    """Fill ``buffers``, back to back, with the bytes of ``fd`` from ``offset`` on (one ``preadv``
    per :data:`_IOV_MAX` buffers, when nothing comes short).

    Raises:
        The error ``ended(position)`` makes: the file ends before the buffers are full.
    """
    for i in range(0, len(buffers), _IOV_MAX):
        part = buffers[i : i + _IOV_MAX]
        wanted = sum(len(buffer) for buffer in part)
        done = os.preadv(fd, part, offset)
        while done < wanted:
            rest = _after(part, done)
            more = os.preadv(fd, rest, offset + done)
            if more <= 0:
                raise ended(offset + done)
            done += more
        offset += wanted


def read_bytes(fd: int, length: int, offset: int, ended: Ended) -> bytes:
    """``length`` bytes of ``fd`` from ``offset`` on, as immutable ``bytes`` (arrays over them are
    read-only from the start).

    Raises:
        The error ``ended(position)`` makes: the file ends before ``length`` bytes.
    """
    buf = os.pread(fd, length, offset)
    while len(buf) < length:
        more = os.pread(fd, length - len(buf), offset + len(buf))
        if not more:
            raise ended(offset + len(buf))
        buf += more
    return buf


def _after(buffers: list[memoryview], done: int) -> list[memoryview]:
    """What of ``buffers`` lies past their first ``done`` bytes."""
    for i, buffer in enumerate(buffers):
        if done < len(buffer):
            return [buffer[done:], *buffers[i + 1 :]]
        done -= len(buffer)
    return []
