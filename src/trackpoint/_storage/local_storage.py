"""Checkpoints in a local file system: temp + fsync + rename, the index last.

Every file of a save is written under a temporary name in the target directory (see
:mod:`trackpoint._storage.temps`), flushed and fsynced, then renamed into place, the
``.index`` last, and the directory is fsynced. A killed save leaves only temporary files,
which readers never look at and a later save into the directory removes. Overwriting a
prefix keeps its previous version until the new index is in place (see
:mod:`trackpoint._storage.previous`). The state file is replaced the same way.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from trackpoint._storage import atomic, is_url, local_files, naming, previous, temps
from trackpoint._storage.opening import Opening
from trackpoint.errors import WriteError

if TYPE_CHECKING:
    from trackpoint._storage.ranged import RangedObject

__all__ = ["LOCAL", "LocalStorage"]

_T = TypeVar("_T")
_log = logging.getLogger("trackpoint")


class LocalStorage:
    """The local file system (see :class:`trackpoint._storage.storage.Storage`)."""

    local_copies = False
    data_put_ahead = False  # renamed together with the index: a rename is instant
    merges_state = False  # writers of one directory share a file system and take turns
    has_directories = True

    def open(self, path: str, what: str) -> tuple[int, os.stat_result]:
        return local_files.open_regular(path, what)

    def read(self, path: str, what: str, limit: int) -> tuple[bytes, os.stat_result]:
        return local_files.read_regular(path, what, limit)

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def list_names(self, directory: str) -> list[str]:
        return os.listdir(directory)

    def open_data(
        self, path: str, what: str, whole_within: int = -1
    ) -> tuple[int, os.stat_result, RangedObject | None]:
        fd, stat = local_files.open_regular(path, what)
        return fd, stat, None

    def start_data(self, path: str, what: str, whole_within: int) -> Opening:
        fd, stat, _ = self.open_data(path, what)  # a local file opens at once
        return Opening(lambda: (fd, stat, None), functools.partial(os.close, fd))

    def temp_path(self, final: str) -> str:
        return temps.temp_path(final)

    def prepare(self, prefix: str) -> None:
        """Create the directory of ``prefix`` if needed, clear what killed saves left in it, and
        finish an interrupted overwrite of ``prefix`` (so TensorFlow reads it again)."""
        directory = os.path.dirname(prefix)
        if directory:
            os.makedirs(directory, exist_ok=True)
        temps.remove_stale_temps(directory)
        previous.settle(prefix)

    def put_data(self, data_files: Sequence[tuple[str, str]], prefix: str) -> list[tuple[str, str]]:
        return []  # renamed together with the index: a rename is instant

    def withdraw(self, data_files: Sequence[tuple[str, str]], prefix: str) -> None:
        """Nothing was put ahead (see :meth:`put_data`)."""

    def publish(
        self,
        data_files: Sequence[tuple[str, str]],
        index_temp: str,
        index_final: str,
        num_shards: int,
        others: Sequence[str] = (),
        uploaded: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Rename fsynced temporaries into place: data files first, the index last.

        At no instant does the prefix lack a whole checkpoint: the index is replaced by one
        rename, and data files the current index names are kept under the previous prefix
        until the new index is in place. Data files the new index (of ``num_shards`` shards)
        does not name are removed afterwards; their space is freed on a helper thread.

        Raises:
            OSError: Nothing was published and the prefix holds what it held before.
            WriteError: A rename failed part way and the previous version could not be put back;
                the message says where it is.
        """
        if others or uploaded:
            raise ValueError("data files other processes wrote are published with the rest on a local filesystem")
        prefix = index_final[: -len(naming.index_filename(""))]
        previous.settle(prefix)
        new = {final for _, final in data_files}
        old = previous.data_files(prefix)
        named = {naming.data_filename(prefix, i, num_shards) for i in range(num_shards)}
        kept = not new.isdisjoint(old) and os.path.exists(index_final)
        if kept:
            previous.keep(prefix)
        done: list[str] = []
        try:
            for temp, final in data_files:
                os.replace(temp, final)
                done.append(final)
            os.replace(index_temp, index_final)
        except BaseException as exc:
            _undo(prefix, kept, [path for path in done if path not in old], exc)
            raise
        atomic.fsync_directory(os.path.dirname(index_final))
        try:  # the new version is published: what follows only tidies up, and may fail quietly
            atomic.remove([path for path in old if path not in named])
            previous.discard(prefix)
        except OSError:
            pass  # left for the next save of this prefix to remove

    def discard(self, paths: Sequence[str], context: str) -> None:
        """Nothing is put ahead here (see :meth:`put_data`); any file named is removed all the same."""
        for path in paths:
            try:
                atomic.remove_quietly(path)
            except OSError as exc:
                _log.warning("%s: could not delete the uncommitted file %s: %s", context, path, exc)

    def prefixes_in_use(self, directory: str) -> set[str]:
        """None: a save replaces a prefix whole, keeping its previous version until it is done."""
        return set()

    def remove_orphans(self, directory: str, keep: Sequence[str] = ()) -> list[str]:
        """Nothing: a killed save leaves only temporaries, which the next :meth:`prepare` clears."""
        return []

    def delete(self, prefix: str) -> None:
        """Delete the checkpoint and what an interrupted overwrite of it left, the index first;
        the space is freed on a helper thread (see :func:`trackpoint._storage.atomic.remove`)."""
        kept = previous.previous_prefix(prefix)
        atomic.remove(
            [naming.index_filename(prefix)]
            + previous.data_files(prefix)
            + [naming.index_filename(kept)]
            + previous.data_files(kept)
        )

    def read_versioned(self, path: str, what: str, limit: int) -> tuple[bytes, str | None] | None:
        """The file's bytes, with no version: a rename replaces it whole (see :meth:`swap`)."""
        try:
            return local_files.read_regular(path, what, limit)[0], None
        except FileNotFoundError:
            return None

    def swap(self, path: str, data: bytes, version: str | None) -> bool:
        """Replace the file atomically; ``version`` is not checked (writers of one directory
        share a file system and take turns through the manager)."""
        atomic.write_file(path, data)
        return True

    def require_swap(self, path: str) -> None:
        """A rename always replaces a file whole."""

    def relative(self, directory: str, path: str) -> str:
        """Paths inside ``directory`` relative to it (TF's ``save_relative_paths=True``), others absolute.

        Unlike TF, a relative path given from the working directory is re-based on ``directory``
        rather than stored as is (which would point to the wrong place when read back). A URL
        stays whole.
        """
        if is_url(path):
            return path
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(directory))
        return os.path.abspath(path) if rel.startswith(os.pardir) else rel

    def absolute(self, directory: str, stored: str) -> str:
        """A URL or an absolute path stands for itself, wherever the state file is."""
        return stored if os.path.isabs(stored) or is_url(stored) else os.path.join(directory, stored)

    def directory(self, path: str) -> str:
        return path

    def directly_in(self, directory: str, path: str) -> bool:
        """By real paths: no ``..``, absolute path or symlinked subdirectory leads elsewhere."""
        head = os.path.dirname(path)
        if is_url(path):  # named in a local state file: never inside a local directory
            return head == directory
        try:
            return os.path.samefile(head or ".", directory)
        except OSError:
            return os.path.realpath(head or ".") == os.path.realpath(directory)

    def real_outside(self, directory: str, prefix: str) -> str | None:
        real_index = os.path.realpath(naming.index_filename(prefix))
        if os.path.dirname(real_index) == os.path.realpath(directory):
            return None
        return real_index.removesuffix(".index")

    def readable_prefix(self, prefix: str) -> str:
        return previous.readable_prefix(prefix)

    def find_prefix(self, path: str, look_up: Callable[[str], _T]) -> tuple[bool, _T | None]:
        return not os.path.isdir(path), None


def _undo(prefix: str, kept: bool, added: list[str], cause: BaseException) -> None:
    """Return the prefix to its previous version after a rename failed part way."""
    for path in added:  # data files no index names
        atomic.remove_quietly(path)
    if not kept:
        return
    try:
        previous.settle(prefix)
    except OSError as exc:
        raise WriteError(
            f"could not write checkpoint {prefix}: {cause}; then putting its previous version back failed ({exc}). "
            f"The previous version is whole at {previous.previous_prefix(prefix)}, and trackpoint reads it when "
            f"asked for {prefix}; TensorFlow cannot read {prefix} until the next save to it or "
            f"`trackpoint verify --repair {prefix}` puts it back."
        ) from cause


LOCAL = LocalStorage()
