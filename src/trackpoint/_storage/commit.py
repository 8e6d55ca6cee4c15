"""Writing to an object store, which has no renames: a bundle committed by its index, the state object swapped.

An object store's only atomic step is a write made conditional on what is at the name. A
bundle is written locally first (its temporary names are in the temporary directory, see
:func:`trackpoint._storage.temps.temp_path`), then :func:`commit` uploads each data file under
its final name and the index last, every object only if absent: the index is the commit.
Data objects left without an index by a killed writer are not read by anyone; see
:mod:`trackpoint._storage.object_bundles` for how they are skipped and cleared. What this
writer put is deleted again only while it still holds this writer's bytes (:func:`delete_own`).
The ``checkpoint`` state object is replaced by :func:`swap`, only if it is still the version
read (:func:`trackpoint._storage.fsspec_io.read_versioned`).

How each store makes a write conditional and tells whose bytes an object holds is in
:mod:`.providers`.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from trackpoint._storage import providers
from trackpoint._storage.fsspec_io import exists, filesystem
from trackpoint._storage.store_errors import translate
from trackpoint.errors import WriteError

__all__ = ["commit", "delete_own", "delete_uncommitted", "require_swap", "swap", "upload"]

_T = TypeVar("_T")
_log = logging.getLogger("trackpoint")


def _write_call(url: str, action: Callable[[], _T]) -> _T:
    """Run one write request; a precondition failure (the object exists) is FileExistsError."""
    try:
        return action()
    except FileExistsError:
        raise
    except Exception as exc:
        raise translate(url, "object", exc, doing="write") from exc


def commit(
    data_files: Sequence[tuple[str, str]],
    index_local: str,
    index_url: str,
    what: str | None = None,
    others: Sequence[str] = (),
    uploaded: Sequence[str] = (),
) -> None:
    """Publish a bundle written locally to the object store, without renames.

    Each data file is uploaded under its final name, only if no object is there yet (S3
    ``If-None-Match: *``; a multipart upload is completed with the same condition, or
    aborted). Then the index, on the same condition: that write is the commit. Another
    writer of the prefix, or one resumed after it was thought dead, finds an object in
    place and publishes nothing; the data objects this call created are deleted again, each
    only while it still holds this writer's bytes (:func:`delete_own`).
    ``others`` are data objects the index names that other processes uploaded already
    (:func:`upload`); they must be there before the index goes up and still after.
    ``uploaded`` are data objects this writer put already (by :func:`upload`, while it built
    the index): they must still be there after the index; the caller deletes them if this
    raises (:func:`delete_own`).

    Safetensors shards and their ``.index.json`` (or a single file, as its own index) are
    published the same way; ``what`` names them in messages (by default "checkpoint <prefix>").

    Raises:
        WriteError: Nothing was committed; the message says why.
    """
    what = what or f"checkpoint {index_url.removesuffix('.index')}"
    fs, _ = filesystem(index_url)
    upload(data_files, what)
    created = list(data_files)
    try:
        _require(others, what, "before")
        upload([(index_local, index_url)], what, compare_bytes=True)
        created.append((index_local, index_url))
        # A cleanup elsewhere (a manager sweeping what it took for a dead writer's objects)
        # may have removed a data object before the index landed: un-commit rather than leave
        # an index whose data is gone.
        _require([*(final for _, final in data_files), *uploaded, *others], what, "while")
    except BaseException:
        delete_own(created[::-1], index_url)
        raise
    finally:
        fs.invalidate_cache()


def upload(files: Sequence[tuple[str, str]], what: str, compare_bytes: bool = False) -> list[str]:
    """Put each local file of ``(local, url)`` at its URL, only if nothing is there; return the
    URLs, once all are up. On any failure, those this call put are deleted again (those
    still holding its bytes: :func:`delete_own`).

    Raises:
        WriteError: An object is there already (another writer's), or an upload failed.
    """
    created: list[tuple[str, str]] = []
    try:
        for local, final in files:
            fs, path = filesystem(final)
            try:
                _write_call(final, functools.partial(fs.put_file, local, path, mode="create"))
            except FileExistsError as exc:
                if not _holds(fs, path, local, compare_bytes):
                    raise WriteError(
                        f"{final} exists already, so {what} was not committed: another writer is saving to (or "
                        "has saved) this name, and objects of an object store are never overwritten by a save; "
                        "save to a new name",
                        path=final,
                    ) from exc
                # A retry of our own write whose answer was lost (a dropped connection):
                # the object there is the one this call wrote.
            created.append((local, final))
    except BaseException:
        delete_own(created[::-1], files[0][1] if files else "")
        raise
    return [url for _, url in created]


def _require(urls: Sequence[str], what: str, when: str) -> None:
    missing = [url for url in urls if not exists(url)]
    if missing:
        raise WriteError(
            f"{missing[0]} was deleted {when} {what} was committed (by another writer's cleanup of this "
            "directory), so it was withdrawn; save again",
            path=missing[0],
        )


def delete_uncommitted(urls: Iterable[str], context: str) -> None:
    """Delete objects a failed commit put; a failure is logged and the rest are tried (nothing
    reads them uncommitted, and a later save clears what is left)."""
    for url in urls:
        fs, path = filesystem(url)
        try:
            fs.rm_file(path)
        except Exception as exc:  # noqa: BLE001 - left uncommitted: no reader looks at it
            _log.warning("%s: could not delete the uncommitted object %s: %s", context, url, exc)


def delete_own(files: Sequence[tuple[str, str]], context: str) -> None:
    """Delete the objects of ``(local, url)`` pairs this writer put, each only if it still holds
    the bytes of ``local`` (by its ETag or MD5): one another writer put over it, or one whose
    content cannot be told, is left for a later cleanup rather than deleted with its data."""
    for local, url in files:
        fs, path = filesystem(url)
        if not _holds(fs, path, local, compare_bytes=False):
            _log.warning(
                "%s: left %s in place: it is not (or cannot be told to be) the object this save put", context, url
            )
            continue
        delete_uncommitted([url], context)


def _holds(fs: Any, path: str, local: str, compare_bytes: bool) -> bool:
    """Whether the object at ``path`` holds exactly the bytes of the local file ``local``.

    By the checksum the store gives (:func:`trackpoint._storage.providers.holds_by_checksum`);
    with ``compare_bytes``, failing that, by downloading it (for an index, small).
    """
    try:
        fs.invalidate_cache(path)
        info = fs.info(path)
        size = os.path.getsize(local)
        if int(info.get("size") or -1) != size:
            return False
        if providers.holds_by_checksum(info, local, size):
            return True
        if compare_bytes:
            with open(local, "rb") as f:
                return bytes(fs.cat_file(path)) == f.read()
    except Exception:  # noqa: BLE001 - cannot tell: treated as another writer's
        return False
    return False


def require_swap(url: str) -> None:
    """Raise InvalidArgumentError unless objects at ``url`` can be swapped (see :func:`swap`)."""
    fs, _ = filesystem(url)
    providers.condition(fs, url, "")


def swap(url: str, data: bytes, version: str | None) -> bool:
    """Write ``data`` at ``url`` only if the object there is still ``version`` (None: if none is there).

    Returns:
        True if written; False if another writer changed or created the object first (read
        it again, merge, and swap against its new version). Only this lost race is what the
        callers' compare-and-swap loops retry; a failed request raises, its client's retries spent.

    Raises:
        WriteError: The write failed for another reason (DeadlineExceededError, PermissionDeniedError:
            see :func:`trackpoint._storage.store_errors.translate`).
        InvalidArgumentError: The store has no conditional writes.
    """
    fs, path = filesystem(url)
    keywords = providers.condition(fs, url, version)
    try:
        providers.put_if(fs, path, data, keywords)
    except BaseException as exc:
        if providers.precondition_failed(exc) or (version is not None and isinstance(exc, FileNotFoundError)):
            return False
        if isinstance(exc, Exception):
            raise translate(url, "object", exc, doing="write") from exc
        raise
    finally:
        fs.invalidate_cache(path)
    return True
