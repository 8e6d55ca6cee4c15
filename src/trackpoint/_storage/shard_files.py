"""The data files of one checkpoint as a reader holds them: opened once, released, checked when reopened.

A reader keeps each ``.data-*`` file open after its first read (at a URL, a local copy that
holds the ranges read so far; see :mod:`trackpoint._storage.ranged`). A restore releases them
when it returns (see :meth:`ShardFiles.release`), so that nothing stays open while values
wait for objects not created yet; a later read reopens the file and first checks that it
is still the one the index describes, so that a checkpoint replaced or deleted meanwhile
raises instead of returning other values.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from trackpoint._storage import files, naming
from trackpoint._storage.spans import Spans
from trackpoint._storage.storage import storage_for
from trackpoint._storage.store_errors import UNANSWERED
from trackpoint.errors import CheckpointError, DataLossError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from trackpoint._storage.opening import Opening
    from trackpoint._storage.ranged import RangedObject
    from trackpoint._storage.storage import Storage

__all__ = ["ShardFiles", "identity", "start_shard"]

_log = logging.getLogger("trackpoint")

Identity = tuple[int, int, int, int]


def identity(stat: os.stat_result) -> Identity:
    """What tells one file from another at the same path: device, inode, size, modification time."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


class ShardFiles:
    """The open data shards of the checkpoint whose index is at ``index_path`` (as it was: ``index``).

    ``readable_key`` shows a stored key in messages (the format layer knows how slice keys read);
    the storage knows only that keys are strings.

    Thread-safe: batched reads open shards from helper threads too.
    """

    def __init__(
        self, prefix: str, index_path: str, index: Identity, num_shards: int, readable_key: Callable[[str], str] = str
    ) -> None:
        self.prefix = prefix
        self._readable_key = readable_key
        self.index_path = index_path
        self.num_shards = num_shards
        self._storage = storage_for(prefix)
        self._index_identity = index
        self._fds: dict[int, tuple[int, int]] = {}  # shard id -> (descriptor, size when opened)
        # At a URL: shard id -> its local copy, filled with the ranges readers ask for.
        self._objects: dict[int, RangedObject] = {}
        self._starting: dict[int, Opening] = {}  # shards begun by prefetch, not opened yet
        # What each file was when first opened, so that a reopen after release() can tell
        # whether it still is the checkpoint this index describes.
        self._identities: dict[int, Identity] = {}
        self._released = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def local_copies(self) -> bool:
        """Whether the shards are read from local copies fetched range by range (at a URL)."""
        return self._storage.local_copies

    def path(self, shard_id: int) -> str:
        return naming.data_filename(self.prefix, shard_id, self.num_shards)

    def open(
        self,
        shard_id: int,
        key: str,
        spans: Spans | None = None,
        whole_within: int = -1,
        wait: bool = True,
    ) -> tuple[int, int]:
        """``(descriptor, size)`` of a shard, opened on first use; ``key`` names who needs it.

        ``spans`` are the byte ranges ``[start, end)`` the caller is about to read. A local file
        ignores them; at a URL only those are fetched into the local copy the descriptor reads
        (see :mod:`trackpoint._storage.ranged`): None fetches the whole object, ``()`` nothing.
        ``whole_within``: at a URL, a shard opened now of at most this many bytes starts
        downloading whole. ``wait=False``: the spans are a hint of what is read next; a
        download of the whole object they start is not waited for (the reads wait for it).

        Raises:
            NotFoundError: The shard is missing.
            DataLossError: After :meth:`release`, the file is no longer the one read before.
            InvalidArgumentError: The reader is closed.
        """
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"reader for {self.prefix} is closed")
            cached = self._fds.get(shard_id)
            if cached is None:
                cached = self._open(shard_id, key, whole_within)
            mirror = self._objects.get(shard_id)
        if mirror is None:
            return cached
        mirror.ensure(spans, wait)  # outside the lock: other shards are fetched meanwhile
        return mirror.fd, cached[1]

    def prefetch(self, limit: int, expected: dict[int, int]) -> None:
        """At a URL, start downloading the data objects whole, in order while together they hold
        at most ``limit`` bytes (see :meth:`RangedObject.prefetch`); locally, nothing.

        ``expected``: sizes the index suggests (shard id -> bytes). A shard expected to fit is
        opened by the download's own GET, with no HEAD first (see :meth:`RangedObject.opened`).
        A shard that cannot be opened is left for the read that needs it to report, unless the
        store did not answer, which this raises.
        """
        if not self.local_copies:
            return
        if self.num_shards == 1 and expected.get(0, limit + 1) <= limit:
            # The only shard: its download's GET is sent now and answered while the caller works
            # on the object graph; the first read takes the answer (see Storage.start_data).
            with self._lock:
                wanted = self._may_begin(0)
            opening = start_shard(self._storage, self.path(0), limit) if wanted else None
            if opening is not None:
                self.begun(0, opening)
            return
        total = 0
        for shard_id in range(self.num_shards):
            guess = expected.get(shard_id, limit + 1)
            try:
                total += self.open(shard_id, "", (), whole_within=limit - total if guess <= limit - total else -1)[1]
            except UNANSWERED:
                raise
            except CheckpointError:
                return
            with self._lock:
                mirror = self._objects.get(shard_id)
            if total > limit or mirror is None:
                return
            mirror.prefetch()

    def begun(self, shard_id: int, opening: Opening) -> None:
        """Take ``opening``, the shard at :meth:`path` ``shard_id`` begun before this reader knew
        its shards, as :meth:`prefetch` would have begun it; let it go if the shard is open or
        begun already, or the reader closed."""
        with self._lock:
            if self._may_begin(shard_id):
                self._starting[shard_id] = opening
                return
        opening.cancel()

    def _may_begin(self, shard_id: int) -> bool:
        """Whether the shard may be begun ahead (under the lock): neither open nor begun, the reader open."""
        return shard_id not in self._fds and shard_id not in self._starting and not self._closed

    def held_whole(self, shard_id: int) -> bool:
        """Whether the shard is open and, at a URL, all of it is in the local copy already or
        downloading whole (the reads wait for their bytes), as one begun by :meth:`prefetch` is meant to."""
        with self._lock:
            if shard_id in self._starting:
                return True
            if shard_id not in self._fds:
                return False
            mirror = self._objects.get(shard_id)
        return mirror is None or mirror.coming_whole

    def _open(self, shard_id: int, key: str, whole_within: int = -1) -> tuple[int, int]:
        """Open a shard (under the lock): a local file, or the mirror of an object at a URL."""
        path = self.path(shard_id)
        opened = self._finish_started(shard_id)
        try:
            fd, stat, mirror = opened or self._storage.open_data(path, "data shard", whole_within)
        except NotFoundError as exc:
            if self._released or self.index_changed():
                raise self.changed(NotFoundError, path, key, "this data shard was deleted") from exc
            raise NotFoundError(
                f"{path}: data shard of {self.prefix} is missing (needed for key {self._readable_key(key)!r}); "
                "the checkpoint is incomplete: copy every '.data-*' file next to its '.index'",
                path=path,
                key=key,
            ) from exc
        try:
            found = identity(stat)
            if self._released:
                self._check_unchanged(shard_id, found, path, key)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        self._identities.setdefault(shard_id, found)
        self._fds[shard_id] = (fd, found[2])
        if mirror is not None:
            self._objects[shard_id] = mirror
        return self._fds[shard_id]

    def _finish_started(self, shard_id: int) -> tuple[int, os.stat_result, RangedObject | None] | None:
        """The shard as :meth:`prefetch` began to open it, if it did and that went well. As a
        prefetch that fails, one that failed is forgotten (the caller opens the shard again and
        reports what is wrong), unless the store did not answer: asking again would wait as long."""
        starting = self._starting.pop(shard_id, None)
        if starting is None:
            return None
        try:
            return cast(tuple[int, os.stat_result, "RangedObject | None"], starting.finish())
        except UNANSWERED:
            raise
        except CheckpointError as exc:
            _log.debug("%s: the download begun ahead failed; the read opens the shard again: %s", self.prefix, exc)
            return None

    def _check_unchanged(self, shard_id: int, found: Identity, path: str, key: str) -> None:
        """After :meth:`release`: raise unless a reopened data file is the one this index describes.

        A shard read before the release must be the very file read then (same device,
        inode, size and modification time); one never read is trusted while the index file
        is unchanged, since every save replaces the index after its data files.
        """
        known = self._identities.get(shard_id)
        if (found != known) if known is not None else self.index_changed():
            raise self.changed(DataLossError, path, key, "this data file was replaced or modified")

    def state(self, shard_id: int, fd: int) -> tuple[int, int]:
        """What changes when the contents of the shard open as ``fd`` change: its size and
        modification time; at a URL its size alone, since only this reader writes its local
        copy, with bytes of one version (a download may still be filling it)."""
        with self._lock:
            mirror = self._objects.get(shard_id)
        if mirror is not None and mirror.fd == fd:
            return mirror.size, 0
        stat = os.fstat(fd)
        return stat.st_size, stat.st_mtime_ns

    def index_changed(self) -> bool:
        """Whether the index file at its path is no longer the one the reader parsed (or is gone)."""
        try:
            return identity(files.stat_path(self.index_path)) != self._index_identity
        except OSError:
            return True

    def changed(self, error: type[CheckpointError], path: str, key: str, what: str) -> CheckpointError:
        """The error for a checkpoint deleted or replaced under the reader: the remedy is to read it again.

        Not to repair it: the files were whole when the index was read, and copying or
        re-saving them, right for a checkpoint that never was complete, would not help.
        """
        pending = " (a value a restore kept for an object created later)" if self._released else ""
        return error(
            f"{path}: the checkpoint {self.prefix} was deleted or replaced while being read: {what} after its index "
            f"was read, so key {self._readable_key(key)!r}{pending} cannot be read from it; restore again (or reopen it) to "
            "read the checkpoint as it is now",
            path=path,
            key=key,
        )

    def damaged(self, path: str, key: str, message: str) -> CheckpointError:
        """A DataLossError for bad bytes in a data file, or the error of :meth:`changed` when the
        checkpoint was replaced since its index was read (new data files under the old index),
        or, at a URL, the data object since it was first read (see :mod:`trackpoint._storage.ranged`)."""
        if self.index_changed():
            return self.changed(DataLossError, path, key, "its files were replaced or modified")
        with self._lock:
            mirrors = [m for shard_id, m in self._objects.items() if self.path(shard_id) == path]
        if any(mirror.changed() for mirror in mirrors):
            return self.changed(DataLossError, path, key, "this data object was replaced")
        return DataLossError(message, path=path, key=key)

    def release(self) -> None:
        """Close the files now; a later :meth:`open` reopens them, and raises if they changed meanwhile."""
        with self._lock:
            self._released = True
            fds, self._fds = list(self._fds.values()), {}
            mirrors, self._objects = list(self._objects.values()), {}
            starting, self._starting = list(self._starting.values()), {}
        for opening in starting:
            opening.cancel()
        for fd, _ in fds:
            if fd >= 0:
                os.close(fd)
        for mirror in mirrors:
            mirror.close()

    def close(self) -> None:
        """Close the files; a later :meth:`open` raises."""
        with self._lock:
            self._closed = True
            for fd, _ in self._fds.values():
                if fd >= 0:
                    os.close(fd)
            self._fds.clear()
            for mirror in self._objects.values():
                mirror.close()
            self._objects.clear()
            for opening in self._starting.values():
                opening.cancel()
            self._starting.clear()


def start_shard(storage: Storage, path: str, limit: int) -> Opening | None:
    """``storage.start_data`` of the shard at ``path`` (downloading it whole if it holds at most
    ``limit`` bytes), begun ahead of the read that needs it; None where that failed, which the
    read then reports by opening the shard itself.

    Raises:
        DeadlineExceededError, UnavailableError: The store did not answer: asking again would wait as long.
    """
    try:
        return storage.start_data(path, "data shard", limit)
    except UNANSWERED:
        raise
    except CheckpointError:
        return None
