"""Temporary file names that say who is writing them, and the cleanup of those whose writer is gone.

A save writes every file under ``<final>.tp-tmp-<node>-<pid>-<random>`` first. ``<node>``
names the PID namespace of the writer on the running kernel (a hash of the boot id and the
namespace's inode), because a process id means nothing outside its namespace: a saver in
another container, or on another host sharing the volume, may have the same PID as a dead
process here, or none at all. So a temporary is removed at once only when its writer ran
in this namespace and is dead; one from elsewhere is removed only once it has not changed
for :data:`FOREIGN_TEMP_AGE` seconds, far longer than any save takes to finish its files.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import time

__all__ = ["FOREIGN_TEMP_AGE", "TEMP_MARKER", "node_id", "remove_stale_temps", "temp_path"]

TEMP_MARKER = ".tp-tmp-"
FOREIGN_TEMP_AGE = 24 * 3600.0


def _read_identity(path: str) -> bytes:
    try:
        if path.startswith("/proc/self/ns/"):
            return os.fsencode(os.readlink(path))
        with open(path, "rb") as f:  # bytes: a text codec would be one more import for a first save
            return f.read().strip()
    except OSError:
        return b""


@functools.lru_cache(maxsize=1)
def _node_for(pid: int) -> str:
    # The boot id tells hosts (and reboots) apart, the namespace inode containers on one host;
    # the host name is a fallback where /proc is missing. Cached per PID: a fork may unshare.
    parts = [_read_identity("/proc/sys/kernel/random/boot_id"), _read_identity("/proc/self/ns/pid")]
    if not any(parts):
        parts.append(os.fsencode(os.uname().nodename if hasattr(os, "uname") else ""))
    return hashlib.blake2b(b"\0".join(parts), digest_size=4).hexdigest()


def node_id() -> str:
    """Eight hex digits naming this process's PID namespace on this boot of this host."""
    return _node_for(os.getpid())


def temp_path(final: str) -> str:
    """A temporary name next to the local path ``final`` that records the writing process and
    where it runs (for any path, :meth:`Storage.temp_path <trackpoint._storage.storage.Storage.temp_path>`)."""
    return f"{final}{TEMP_MARKER}{node_id()}-{os.getpid()}-{secrets.token_hex(4)}"


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


def _is_stale(directory: str, name: str, marker: int, now: float) -> bool:
    fields = name[marker + len(TEMP_MARKER) :].split("-")
    if len(fields) == 3 and fields[0] == node_id() and fields[1].isdigit():
        return not _alive(int(fields[1]))
    # Another namespace or host, or a name this version did not write: only its age tells.
    try:
        return now - os.lstat(os.path.join(directory, name)).st_mtime > FOREIGN_TEMP_AGE
    except OSError:
        return False


def remove_stale_temps(directory: str) -> None:
    """Delete temporary files in ``directory`` that no live writer can still publish."""
    directory = directory or "."
    try:
        names = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for name in names:
        marker = name.rfind(TEMP_MARKER)
        if marker >= 0 and _is_stale(directory, name, marker, now):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass  # gone already, or not ours to remove
