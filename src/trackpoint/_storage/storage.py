"""Where a checkpoint's bytes live, behind one interface: every caller asks, none checks.

A checkpoint is either in a local file system, which renames atomically, or in an object
store behind an fsspec URL (``s3://``, ``gs://``...), which has no renames, no directories
and no ``fsync``. Everything that differs between the two is a method of :class:`Storage`:
how a file is opened and read, where a file being written waits (its temporary name), how a
bundle is published (temp + fsync + rename, or final names with the index put only if absent),
how the ``checkpoint`` state file is replaced (a rename, or a compare-and-swap, merged until
it wins), how a save of several processes puts its files, what killed writers leave and which
save numbers that takes, and how names relate (links, ``..`` and directories exist only
locally). :func:`storage_for` picks one by the path; the format layer, the public API, the
tools and the adapters call it and branch on nothing else (``tests/test_storage_seam.py``).
:mod:`.local_storage` and :mod:`.object_storage` are the two implementations.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from trackpoint._storage import is_url
from trackpoint._storage.local_storage import LOCAL
from trackpoint._storage.object_storage import OBJECTS

if TYPE_CHECKING:
    from trackpoint._storage.opening import Opening
    from trackpoint._storage.ranged import RangedObject

__all__ = ["Storage", "storage_for"]

_T = TypeVar("_T")


class Storage(Protocol):
    """What every layer above needs of a place that holds checkpoints: none asks a path whether it is a URL.

    Attributes:
        local_copies: Bytes pass through local copies: a file being written is a copy staged
            for an upload (it needs no ``fsync`` and no early write-back), and a file read is
            fetched into a copy range by range (so a reader says ahead which ranges it needs).
        data_put_ahead: :meth:`put_data` puts data files in place before the index (an upload),
            so in a save of several processes each one puts its own and the committing one
            publishes only its own with the index; otherwise the committing one renames every
            file, which must be visible to it.
        merges_state: Writers elsewhere may replace the state file at any moment, so a writer
            re-reads it, merges its change and swaps again (:meth:`swap`) until it wins (an object
            store); otherwise the writers of a directory take turns and replace it whole.
        has_directories: Directories exist by themselves, and a name may be one (not in an
            object store, where a "directory" is a prefix that objects share).
    """

    local_copies: bool
    data_put_ahead: bool
    merges_state: bool
    has_directories: bool

    # Reading (see trackpoint._storage.files).
    def open(self, path: str, what: str) -> tuple[int, os.stat_result]:
        """A descriptor of the bytes at ``path`` (``what`` names them in messages) and their stat."""
        ...

    def read(self, path: str, what: str, limit: int) -> tuple[bytes, os.stat_result]:
        """The bytes at ``path``, at most ``limit`` of them, and their stat."""
        ...

    def stat(self, path: str) -> os.stat_result:
        """Size and identity (what tells one version from the next) of what is at ``path``."""
        ...

    def exists(self, path: str) -> bool: ...

    def is_file(self, path: str) -> bool:
        """Whether a file (an object) is at ``path``, not a directory."""
        ...

    def list_names(self, directory: str) -> list[str]:
        """The names of the files (objects) directly in ``directory``."""
        ...

    def open_data(
        self, path: str, what: str, whole_within: int = -1
    ) -> tuple[int, os.stat_result, RangedObject | None]:
        """A data shard to read: ``(fd, stat, None)``, or ``(-1, stat, copy)`` where ``copy``
        fetches the ranges asked for into a local file whose descriptor it holds (and starts
        downloading all of it when it holds at most ``whole_within`` bytes)."""
        ...

    def start_data(self, path: str, what: str, whole_within: int) -> Opening:
        """:meth:`open_data`, begun: the shard is given by the opening's ``finish()`` (at a URL
        its download's GET may be answered meanwhile), or let go by its ``cancel()``."""
        ...

    # Writing: each file under temp_path, then publish puts them all in place, the index last.
    def temp_path(self, final: str) -> str:
        """Where a file to be published as ``final`` is written first."""
        ...

    def prepare(self, prefix: str) -> None:
        """Make ready to write a bundle at ``prefix``, clearing what killed writers left."""
        ...

    def put_data(self, data_files: Sequence[tuple[str, str]], prefix: str) -> list[tuple[str, str]]:
        """Put closed data files ``(temp, final)`` in place ahead of the index where that pays;
        return those put (:meth:`publish` takes them as ``uploaded``, :meth:`withdraw` removes them)."""
        ...

    def withdraw(self, data_files: Sequence[tuple[str, str]], prefix: str) -> None:
        """Remove what :meth:`put_data` put, for a bundle that is not published after all."""
        ...

    def publish(
        self,
        data_files: Sequence[tuple[str, str]],
        index_temp: str,
        index_final: str,
        num_shards: int,
        others: Sequence[str] = (),
        uploaded: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Put a bundle's files in place, the index last, so no reader sees part of it."""
        ...

    def discard(self, paths: Sequence[str], context: str) -> None:
        """Delete files :meth:`put_data` put for a bundle that was not committed, whose local
        copies are gone; a failure is logged (``context`` names the save) and the rest are tried."""
        ...

    def prefixes_in_use(self, directory: str) -> set[str]:
        """The prefixes in ``directory`` that a numbered save skips: those holding files a save
        never overwrites (an object store's, left by a killed writer); locally none."""
        ...

    def remove_orphans(self, directory: str, keep: Sequence[str] = ()) -> list[str]:
        """Remove what killed writers left in ``directory`` that no checkpoint names (prefixes in
        ``keep`` aside), after a save that recorded itself; return what was removed."""
        ...

    def delete(self, prefix: str) -> None:
        """Delete the checkpoint at ``prefix``, its index first (a reader never finds an index
        whose data is gone)."""
        ...

    # The state file (see trackpoint._format.state_file).
    def read_versioned(self, path: str, what: str, limit: int) -> tuple[bytes, str | None] | None:
        """The bytes at ``path`` and the version a :meth:`swap` is conditional on; None if absent."""
        ...

    def swap(self, path: str, data: bytes, version: str | None) -> bool:
        """Replace ``path`` by ``data`` if it is still ``version``; False when another writer won."""
        ...

    def require_swap(self, path: str) -> None:
        """Raise when :meth:`swap` cannot be conditional here."""
        ...

    # Names.
    def relative(self, directory: str, path: str) -> str:
        """``path`` as the state file in ``directory`` stores it."""
        ...

    def absolute(self, directory: str, stored: str) -> str:
        """What a path ``stored`` in the state file in ``directory`` names (the reverse of :meth:`relative`)."""
        ...

    def directory(self, path: str) -> str:
        """``path`` as the name of a directory that the paths of what it holds begin with."""
        ...

    def directly_in(self, directory: str, path: str) -> bool:
        """Whether ``path`` names something directly inside ``directory`` (by real paths where
        links and ``..`` exist: none leads elsewhere)."""
        ...

    def real_outside(self, directory: str, prefix: str) -> str | None:
        """Where ``prefix``'s bytes really are when that is not directly in ``directory``."""
        ...

    def readable_prefix(self, prefix: str) -> str:
        """The prefix a reader opens for ``prefix`` (locally, an unfinished overwrite's previous version)."""
        ...

    def find_prefix(self, path: str, look_up: Callable[[str], _T]) -> tuple[bool, _T | None]:
        """Whether ``path`` names a checkpoint prefix rather than a directory, and what
        ``look_up`` of its index gave where telling the two apart needed it."""
        ...


def storage_for(path: str) -> Storage:
    """The storage that holds ``path``: an object store for an fsspec URL, else the local file system.

    Examples:
        >>> storage_for("s3://bucket/run/ckpt-1").local_copies, storage_for("/tmp/ckpt-1").local_copies
        (True, False)
    """
    return OBJECTS if is_url(path) else LOCAL
