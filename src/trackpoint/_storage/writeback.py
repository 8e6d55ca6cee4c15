"""Starting the writeback of a file being written, so the fsync at the end has little left.

Every save is made durable with fsync before it is published. Left alone, the kernel
writes a new file's pages back only once they are old or many, so the fsync of a large
save waits for nearly all of its bytes to reach the disk after the last one was written.
Asking for each written range to be written back at once (Linux's ``sync_file_range``
with ``SYNC_FILE_RANGE_WRITE``: start, do not wait) overlaps the disk with the rest of the
save; see PERFORMANCE.md, "Durable saves". Elsewhere, or when the call fails, nothing is
done: the fsync still makes the save durable, only later.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

__all__ = ["WRITEBACK_BYTES", "start_writeback"]

#: Bytes written between two requests: large enough that a save of many small tensors
#: makes few calls, small enough that the disk starts early.
WRITEBACK_BYTES = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range``, looked up on first use (not at import: a save may never need it)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range  # the process's own libc
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``length`` bytes at ``offset`` of ``fd`` to disk; do not wait.

    Examples:
        >>> import os, tempfile
        >>> fd, path = tempfile.mkstemp()
        >>> os.write(fd, b"x" * 100)
        100
        >>> start_writeback(fd, 0, 100)
        >>> os.close(fd); os.remove(path)
    """
    call = _sync_file_range()
    if call is not None and length > 0:
        call(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # a failure only leaves the work to fsync
