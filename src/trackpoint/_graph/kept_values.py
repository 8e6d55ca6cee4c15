"""Values still waiting for their objects, read into memory before trackpoint removes their files.

A restore closes its checkpoint's files when it returns; a value waiting for an object
that does not exist yet (restore-on-create) is read later from the reopened files. When
trackpoint itself is about to delete or replace those files (``CheckpointManager`` rotating
old checkpoints out, a save overwriting a prefix), such values would be lost, so they are
read into memory first. TensorFlow keeps the files open instead, which keeps their disk
space until the restore is gone; here the same bytes are held in memory, and only the
values no object has taken yet. A checkpoint changed by anything else is still caught when
the value is finally read (see ``BundleReader.release_files``).
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["keep_values_of", "register"]


class _Waiting(Protocol):
    @property
    def real_prefix(self) -> str: ...

    def keep_waiting_values(self) -> None: ...


_restores: weakref.WeakSet[_Waiting] = weakref.WeakSet()


def register(restore: _Waiting) -> None:
    """Note a restore whose values may be read after it returns (held weakly: it goes with its status)."""
    _restores.add(restore)


def keep_values_of(prefix: str) -> None:
    """Before the files of ``prefix`` go: every live restore of it reads its waiting values into memory."""
    if not _restores:  # the usual save: nothing restored is alive, so no path to resolve
        return
    target = os.path.realpath(prefix)
    for restore in list(_restores):
        if restore.real_prefix == target:
            restore.keep_waiting_values()
