"""Publishing files so that no reader ever sees a partial checkpoint under its final name.

Every file of a save is written under a temporary name in the target directory
(``<final>.tp-tmp-<pid>-<random>``), flushed and fsynced, then renamed into place, the
``.index`` last, and the directory is fsynced. A killed save leaves only temporary files,
which readers never look at and the next save into the directory removes.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Sequence

from trackpoint._format.threads import Background

__all__ = ["TEMP_MARKER", "fsync_directory", "prepare_directory", "publish", "remove", "remove_quietly",
           "remove_stale_temps", "temp_path"]

TEMP_MARKER = ".tp-tmp-"


def temp_path(final: str) -> str:
    """A temporary name next to ``final`` that records the writing process."""
    return f"{final}{TEMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"


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


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(directory: str) -> None:
    """Delete temporary files that killed saves left in ``directory`` (their writer is gone)."""
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return
    for name in names:
        marker = name.rfind(TEMP_MARKER)
        if marker < 0:
            continue
        pid_text = name[marker + len(TEMP_MARKER):].split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            remove_quietly(os.path.join(directory or ".", name))


def prepare_directory(prefix: str) -> None:
    """Create the directory of ``prefix`` if needed and clear what killed saves left in it."""
    directory = os.path.dirname(prefix)
    if directory:
        os.makedirs(directory, exist_ok=True)
    remove_stale_temps(directory)


def publish(data_files: Sequence[tuple[str, str]], index_temp: str, index_final: str) -> None:
    """Rename fsynced temporaries into place: data files first, the index last.

    An existing index at the final name is removed first, so that overwriting a checkpoint
    never shows its old index next to new data. The files replaced are freed afterwards on
    a helper thread (see :func:`remove`).
    """
    held = _hold([final for _, final in data_files] + [index_final])
    try:
        remove_quietly(index_final)
        for temp, final in data_files:
            os.replace(temp, final)
        os.replace(index_temp, index_final)
        fsync_directory(os.path.dirname(index_final))
    finally:
        _release(held)


def remove(paths: Sequence[str]) -> None:
    """Delete files now; free their space on a helper thread.

    Freeing a large file's blocks and cached pages takes about 0.2 s per GiB here, and a
    save that replaces or deletes old checkpoints need not wait for it: the name is gone at
    once, and the last descriptor, closed on the helper thread, frees the rest.
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
            held.append(os.open(path, os.O_RDONLY))
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
            os.close(fd)

    Background(close_all, "trackpoint-release")
