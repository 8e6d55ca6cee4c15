"""Asking the kernel to start reading a range of a file that is about to be read.

Why: a converter reads one tensor, then writes it, then reads the next. On a cold page
cache each read waits for the disk, and when the tensors are taken out of file order (a
safetensors file is laid out by name, a TF checkpoint is written breadth first) the
kernel's own readahead, which follows sequential reads, does not help. Announcing the
next tensor's range (``posix_fadvise(POSIX_FADV_WILLNEED)``) before working on the current
one lets the disk read it meanwhile. The pages go to the page cache, not to the process:
no memory of ours is spent. Where the call is missing or fails nothing is done, and the
read simply waits as before. See PERFORMANCE.md, "Converting, rewriting, averaging".

Linux reads at most one readahead window per ``WILLNEED`` call (the larger of the device's
``read_ahead_kb`` and ``max_sectors_kb``: 8 MiB on the machine this was measured on, as
little as 128 KiB to 1.25 MiB on defaults) and silently drops the rest of the range, so a
long range is announced in :data:`CHUNK_BYTES` pieces.
"""

from __future__ import annotations

import os

__all__ = ["CHUNK_BYTES", "MIN_BYTES", "start_readahead"]

#: Shorter ranges are not announced: the kernel's own readahead (megabytes past each read)
#: covers them, and a system call per small tensor would cost more than it saves.
MIN_BYTES = 1 << 20

#: The piece of a long range asked for per call: within one readahead window on common
#: devices, and few enough calls (64 per 64 MiB, about 0.4 ms when the pages are already
#: cached) not to slow a warm read.
CHUNK_BYTES = 1 << 20


def start_readahead(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start reading ``length`` bytes at ``offset`` of ``fd``; do not wait.

    Ranges shorter than :data:`MIN_BYTES` are left alone.

    Examples:
        >>> import os, tempfile
        >>> fd, path = tempfile.mkstemp()
        >>> os.write(fd, b"x" * 100)
        100
        >>> start_readahead(fd, 0, 100)  # too short to ask for: nothing is done
        >>> os.close(fd); os.remove(path)
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is None or length < MIN_BYTES:
        return
    end = offset + length
    try:
        for start in range(offset, end, CHUNK_BYTES):
            advise(fd, start, min(CHUNK_BYTES, end - start), os.POSIX_FADV_WILLNEED)
    except OSError:
        pass  # a hint only: the read itself reports any real problem
