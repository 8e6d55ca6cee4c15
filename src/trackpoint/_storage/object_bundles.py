"""Bundles at a URL: deleting one, and clearing the data objects killed writers left without an index.

An object store has no renames, so a writer puts each data object under its final name and
the index last (see :func:`trackpoint._storage.commit.commit`). A writer killed between the
two leaves data objects that no index names. Nobody reads them, but they hold space, and
they block a later save to the same prefix (a save never overwrites an object, because a
live writer elsewhere may be about to commit them), so a numbered save (``Checkpoint.save``,
``CheckpointManager.save`` without ``checkpoint_number``) skips a number whose prefix holds
objects (:func:`prefixes_in_use`). Two rules clear them without touching a live writer's
objects:

- A save to a prefix removes that prefix's unindexed data objects once the newest of them
  is older than :data:`ABANDONED_AGE`. A live writer puts its index seconds after its last
  data object; a quarter of an hour without one means the writer is gone.
- :func:`remove_orphans` (run by ``CheckpointManager`` after each save) removes unindexed
  data objects older than the newest committed index of the directory: the writer had them
  in place before a later checkpoint was committed, and saves of one manager commit in order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from trackpoint._storage import fsspec_io, naming
from trackpoint.errors import WriteError

__all__ = ["ABANDONED_AGE", "clear_abandoned", "delete_bundle", "prefixes_in_use", "remove_orphans"]

ABANDONED_AGE = 15 * 60.0
_DATA = ".data-"
_log = logging.getLogger("trackpoint")


def _prefix_of(url: str) -> str | None:
    """The checkpoint prefix a data object or index belongs to, or None for other objects."""
    if url.endswith(".index"):
        return url[: -len(".index")]
    head, sep, shard = url.rpartition(_DATA)
    return head if sep and len(shard) == 14 and shard[5:9] == "-of-" else None


def _listing(directory: str, prefix: str = "") -> list[tuple[str, float]]:
    return fsspec_io.list_objects(directory, prefix)


def _objects_of(prefix: str) -> list[tuple[str, float]]:
    """The index and data objects of the checkpoint at URL ``prefix``: one listing of its names."""
    directory, _, name = prefix.rpartition("/")
    return [(url, modified) for url, modified in _listing(directory, name + ".") if _prefix_of(url) == prefix]


def prefixes_in_use(directory: str) -> set[str]:
    """The checkpoint prefixes under URL ``directory`` that any index or data object belongs to.

    A numbered save skips these: a writer killed after its data went up (or after its index,
    before the state object named it) leaves objects that a save would never overwrite.
    """
    return {owner for url, _ in _listing(directory) if (owner := _prefix_of(url)) is not None}


def delete_bundle(prefix: str) -> None:
    """Delete the checkpoint at URL ``prefix``: the index first (which un-commits it), then its data."""
    data = [url for url, _ in _objects_of(prefix) if not url.endswith(".index")]
    fsspec_io.remove([naming.index_filename(prefix), *data])


def clear_abandoned(prefix: str) -> None:
    """Before a save to URL ``prefix``: refuse it if committed, and remove the data objects of a
    writer gone without committing. One listing tells both.

    Raises:
        WriteError: The prefix's index is there (a save never overwrites an object), or the
            prefix holds unindexed data objects younger than :data:`ABANDONED_AGE`: another
            writer may be committing them.
    """
    found = _objects_of(prefix)
    index = naming.index_filename(prefix)
    if any(url == index for url, _ in found):
        raise WriteError(
            f"{index} exists: the checkpoint is committed, and a save never overwrites an object; save to a new "
            "prefix or delete the checkpoint first",
            path=index,
        )
    if not found:
        return
    age = time.time() - max(modified for _, modified in found)
    if age <= ABANDONED_AGE:
        raise WriteError(
            f"{prefix}: {len(found)} data object(s) without an index are there, the newest {age:.0f} s old, so "
            f"another writer may be committing this checkpoint now. Save to another prefix, or delete "
            f"{found[0][0]} and its siblings if that writer is gone (they are removed by a save "
            f"{ABANDONED_AGE:.0f} s after they were written)",
            path=prefix,
        )
    _log.warning("%s: removing %d data object(s) a writer left without an index %.0f s ago", prefix, len(found), age)
    fsspec_io.remove([url for url, _ in found])


def remove_orphans(directory: str, keep: Sequence[str] = ()) -> list[str]:
    """Remove the data objects under URL ``directory`` that no index names and that are older
    than the newest committed index; return them. Prefixes in ``keep`` are left alone.

    A failure to delete one is logged and the rest are tried: the next sweep removes it.
    """
    listing = _listing(directory)
    committed = {url[: -len(".index")]: modified for url, modified in listing if url.endswith(".index")}
    if not committed:
        return []
    newest = max(committed.values())
    orphans = [
        url
        for url, modified in listing
        if (owner := _prefix_of(url)) is not None
        and owner not in committed
        and owner not in keep
        and modified < newest
        and not url.endswith(".index")
    ]
    removed = []
    for url in orphans:
        try:
            fsspec_io.remove([url])
            removed.append(url)
        except WriteError as exc:
            _log.warning("%s: could not remove the uncommitted data object %s: %s", directory, url, exc)
    return removed
