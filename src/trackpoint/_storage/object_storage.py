"""Checkpoints in an object store behind an fsspec URL: final names, the index put last and only if absent.

An object store has no renames and no ``fsync``. A bundle's files are written to local copies
in the temporary directory; each data object goes up under its final name as soon as its
copy is closed, while the index is still being built, and the index goes up last, only if
no object is at its name: that write is the commit (see :func:`trackpoint._storage.commit.commit`).
The state object is replaced by a compare-and-swap on its version. Reads fetch only the byte
ranges asked for (see :mod:`trackpoint._storage.ranged`). What killed writers leave is cleared
by the rules of :mod:`.object_bundles`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from typing import TypeVar

from trackpoint._storage import atomic, commit, fsspec_io, is_url, naming, object_bundles, temps
from trackpoint._storage.opening import Opening
from trackpoint._storage.ranged import RangedObject
from trackpoint._storage.store_errors import UNANSWERED
from trackpoint.errors import CheckpointError

__all__ = ["OBJECTS", "ObjectStorage", "publish_objects"]

_T = TypeVar("_T")


class ObjectStorage:
    """Objects behind fsspec URLs (see :class:`trackpoint._storage.storage.Storage`).

    fsspec and its backends are optional: :func:`trackpoint._storage.fsspec_io.filesystem` imports
    them when a URL is first used.
    """

    local_copies = True
    data_put_ahead = True  # uploaded while the index is built; another process cannot see our copies
    merges_state = True  # writers anywhere may swap the state object
    has_directories = False

    def open(self, path: str, what: str) -> tuple[int, os.stat_result]:
        return fsspec_io.open_object(path, what)

    def read(self, path: str, what: str, limit: int) -> tuple[bytes, os.stat_result]:
        return fsspec_io.read_object(path, what, limit)

    def stat(self, path: str) -> os.stat_result:
        return fsspec_io.stat_object(path)

    def exists(self, path: str) -> bool:
        return fsspec_io.exists(path)

    def is_file(self, path: str) -> bool:
        return fsspec_io.exists(path)  # an object, not a prefix others share

    def list_names(self, directory: str) -> list[str]:
        return [url.rsplit("/", 1)[1] for url, _ in fsspec_io.list_objects(directory.rstrip("/"))]

    def open_data(
        self, path: str, what: str, whole_within: int = -1
    ) -> tuple[int, os.stat_result, RangedObject | None]:
        mirror = RangedObject.opened(path, what, whole_within)
        return -1, mirror.stat, mirror

    def start_data(self, path: str, what: str, whole_within: int) -> Opening:
        return RangedObject.opening(path, what, whole_within)

    def temp_path(self, final: str) -> str:
        """A local name in the temporary directory: the object is uploaded once whole."""
        return temps.temp_path(os.path.join(tempfile.gettempdir(), final.rsplit("/", 1)[-1]))

    def prepare(self, prefix: str) -> None:
        """Clear what killed saves left in the local temporary directory and at the prefix, and
        refuse a prefix whose index is committed (objects are never overwritten)."""
        temps.remove_stale_temps(tempfile.gettempdir())
        object_bundles.clear_abandoned(prefix)

    def put_data(self, data_files: Sequence[tuple[str, str]], prefix: str) -> list[tuple[str, str]]:
        """Upload the closed data files now, each only if absent: an upload mostly waits on the
        network and the server, without the GIL, so it overlaps building the index.

        Raises:
            WriteError: An upload failed, or an object is there already; nothing of these is left.
        """
        commit.upload(data_files, f"checkpoint {prefix}")
        return list(data_files)

    def withdraw(self, data_files: Sequence[tuple[str, str]], prefix: str) -> None:
        """Delete the objects, each only while it still holds the bytes of its local copy:
        another writer's object put over one since is left alone."""
        commit.delete_own(list(reversed(data_files)), f"checkpoint {prefix}")

    def publish(
        self,
        data_files: Sequence[tuple[str, str]],
        index_temp: str,
        index_final: str,
        num_shards: int,
        others: Sequence[str] = (),
        uploaded: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Upload the data files, then the index if absent (the commit); ``others`` are data
        objects other processes uploaded and ``uploaded`` those :meth:`put_data` put, which must
        all be in place. The local copies are removed.

        Raises:
            WriteError: Nothing was committed; the message says why.
        """
        commit.commit(data_files, index_temp, index_final, others=others, uploaded=[url for _, url in uploaded])
        for temp, _ in [*data_files, *uploaded]:
            atomic.remove_quietly(temp)
        atomic.remove_quietly(index_temp)

    def discard(self, paths: Sequence[str], context: str) -> None:
        """Delete the objects, whoever's they are now: with no local copy, none can be told apart."""
        commit.delete_uncommitted(paths, context)

    def prefixes_in_use(self, directory: str) -> set[str]:
        """Those any index or data object belongs to (see :func:`.object_bundles.prefixes_in_use`)."""
        return object_bundles.prefixes_in_use(directory)

    def remove_orphans(self, directory: str, keep: Sequence[str] = ()) -> list[str]:
        """Unindexed data objects older than the newest index (see :func:`.object_bundles.remove_orphans`)."""
        return object_bundles.remove_orphans(directory, keep)

    def delete(self, prefix: str) -> None:
        """Delete the index (the un-commit), then the data objects."""
        object_bundles.delete_bundle(prefix)

    def read_versioned(self, path: str, what: str, limit: int) -> tuple[bytes, str | None] | None:
        return fsspec_io.read_versioned(path, what, limit)

    def swap(self, path: str, data: bytes, version: str | None) -> bool:
        return commit.swap(path, data, version)

    def require_swap(self, path: str) -> None:
        commit.require_swap(path)

    def relative(self, directory: str, path: str) -> str:
        """The name of an object directly under ``directory``; any other URL whole."""
        inside = directory.rstrip("/") + "/"
        name = path[len(inside) :] if path.startswith(inside) else ""
        return name if name and "/" not in name else path

    def absolute(self, directory: str, stored: str) -> str:
        """A URL or an absolute path stands for itself; a name is an object under ``directory``."""
        return stored if os.path.isabs(stored) or is_url(stored) else os.path.join(directory, stored)

    def directory(self, path: str) -> str:
        """Without a trailing slash: ``<directory>/<name>`` is then an object's URL."""
        return path.rstrip("/")

    def directly_in(self, directory: str, path: str) -> bool:
        return os.path.dirname(path) == directory

    def real_outside(self, directory: str, prefix: str) -> str | None:
        """No links or ``..`` in an object store: the name says where the object is."""
        return None if prefix.rsplit("/", 1)[0] == directory.rstrip("/") else prefix

    def readable_prefix(self, prefix: str) -> str:
        """A prefix itself: an object store keeps no previous version (an index is never replaced)."""
        return prefix

    def find_prefix(self, path: str, look_up: Callable[[str], _T]) -> tuple[bool, _T | None]:
        """A prefix is known by its index object (object stores have no directories): ``path``
        names a directory only when it has no index and a state object under it."""
        try:
            found = look_up(naming.index_filename(path))
        except UNANSWERED:  # no sign of a directory either
            raise
        except CheckpointError as missed:
            # Not there, a "directory" by that name, or not readable with the options set for
            # ``path`` (those of a directory "run" need not cover "run.index"): no prefix to read
            # here, so ``path`` is taken for a directory if it holds a state object. An index
            # too large to fetch is refused by the reader, which reads it again.
            try:
                return not self.exists(f"{path.rstrip('/')}/{naming.STATE_FILENAME}"), None
            except CheckpointError as also:
                if type(also) is type(missed):  # refused both ways (credentials, an option): the index was asked first
                    raise missed from missed.__cause__
                raise
        return True, found


OBJECTS = ObjectStorage()


def publish_objects(files: Sequence[tuple[str, str]], what: str) -> None:
    """Put local ``(file, url)`` pairs at their URLs as a bundle is committed there (see
    :func:`trackpoint._storage.commit.commit`): each only if nothing is at its URL, the last one
    (an index) last; ``what`` names them in messages.

    Raises:
        WriteError: Nothing was published; the message says why.
    """
    *first, (last_local, last_url) = files
    commit.commit(first, last_local, last_url, what=what)
