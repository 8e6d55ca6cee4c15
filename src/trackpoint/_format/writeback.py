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

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

__all__ = ["WRITEBACK_BYTES", "start_writeback"]

#: Bytes written between two requests: large enough that a save of many small tensors
#: makes few calls, small enough that the disk starts early.
WRITEBACK_BYTES = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_call = _sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``length`` bytes at ``offset`` of ``fd`` to disk; do not wait.

    Example:
        >>> import os, tempfile
        >>> fd, path = tempfile.mkstemp()
        >>> os.write(fd, b"x" * 100)
        100
        >>> start_writeback(fd, 0, 100)
        >>> os.close(fd); os.remove(path)
    """
    if _call is not None and length > 0:
        _call(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # a failure only leaves the work to fsync
