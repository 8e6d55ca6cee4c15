"""File primitives of saving: whole files written atomically, durable renames, removals freed in the background.

The protocol built on them is in :mod:`trackpoint._storage.local_storage`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from trackpoint._storage.temps import temp_path

__all__ = ["fsync_directory", "remove", "remove_quietly", "write_file"]


def write_file(
    path: str, data: bytes, commit: Callable[[str], None] | None = None, temp: str | None = None, durable: bool = True
) -> None:
    """Replace ``path`` by a file holding ``data``, atomically and durably.

    ``data`` goes to a temporary name beside ``path`` (see :mod:`.temps`) and is fsynced;
    then ``commit(temp)`` puts it in place, by default a rename over ``path`` followed by an
    fsync of the directory. A reader sees the old file or the new one, never part of one.
    On any failure, the temporary file is removed and the error propagates unchanged.

    Args:
        path: The final name.
        data: The whole contents.
        commit: Called with the temporary name once it is durable; must put it at ``path``
            (a bundle's index is published together with its data files this way).
        temp: The temporary name, when not beside ``path`` (a local copy staged for an upload).
        durable: False for a staged copy, which is not fsynced: a crash before its upload
            commits nothing.
    """
    temp = temp or temp_path(path)
    try:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if commit is None:
            os.replace(temp, path)
            fsync_directory(os.path.dirname(path))
        else:
            commit(temp)
    except BaseException:
        remove_quietly(temp)
        raise


def fsync_directory(directory: str) -> None:
    """Make renames in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove(paths: Sequence[str]) -> None:
    """Delete files now; free their space on a helper thread.

    Freeing a large file's blocks and cached pages takes time in proportion to its size
    (see PERFORMANCE.md), and a save that replaces or deletes old checkpoints need not wait
    for it: the name is gone at once, and the last descriptor, closed on the helper thread,
    frees the rest.
    """
    held = _hold(paths)
    try:
        for path in paths:
            remove_quietly(path)
    finally:
        _release(held)


def _hold(paths: Sequence[str]) -> list[int]:
    """Descriptors keeping these files' contents alive past an unlink or a replace (POSIX only:
    elsewhere an open file cannot be replaced)."""
    if os.name != "posix":
        return []
    held = []
    for path in paths:
        try:
            # Never blocks, even on a FIFO someone put in place of a checkpoint file.
            held.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError:
            pass  # not there (or not readable): nothing to hold
    return held


def _release(fds: list[int]) -> None:
    """Close ``fds`` on a helper thread that is not waited for, at low priority where possible."""
    if not fds:
        return

    def close_all() -> None:
        try:  # Linux sets the priority of a single thread this way: let the caller's work go first
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass  # ours alone to close: nothing to report, and the rest still get closed

    # A plain daemon thread: nothing waits for it, and the interpreter may exit meanwhile.
    threading.Thread(target=close_all, name="trackpoint-release", daemon=True).start()
