"""Objects behind an fsspec URL: read as a reader reads local files; a bundle committed without renames.

Reading: an index or state object is fetched whole (:func:`read_object`). A data object is
mirrored in a local sparse file that holds the byte ranges readers asked for, fetched by
ranged GETs, neighbours together, or the whole object by one streamed download when most of
it is wanted (see :mod:`.ranged`; :func:`open_object` is that download). Every checksum is
then verified on the local bytes as for any checkpoint; nothing calls ``fileno``, ``fsync`` or
``mmap`` on a remote stream. Local copies live in ``tempfile.gettempdir()`` (``TMPDIR``).

A remote object's identity (what tells one version from another at the same URL) is its size
and its ETag (or generation, or modification time): :func:`stat_object` returns it in the
fields of an ``os.stat_result`` that :mod:`~trackpoint._storage.shard_files` compares, so a
checkpoint replaced while it is read raises as a local one does.

Writing: a bundle is written locally first (its temporary names are in the temporary
directory, see :func:`trackpoint._storage.temps.temp_path`), then :func:`commit` uploads each
data file under its final name and the index last, every object only if absent: the index
is the commit. Data objects left without an index by a killed writer are not read by
anyone; see :mod:`trackpoint._storage.object_bundles` for how they are skipped and cleared.

Credentials and endpoints come from :func:`trackpoint.set_storage_options` for a URL prefix,
else from fsspec's configuration (for example the environment variables
``FSSPEC_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``), as for any fsspec user. A request is tried
as often as its client's options say, never more; what it then raises is translated by
:mod:`.store_errors` (a timeout, a refusal, an option the client does not take).
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import logging
import os
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from trackpoint._storage import s3_get
from trackpoint._storage.storage_options import options_for
from trackpoint._storage.store_errors import call, translate
from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError, WriteError

__all__ = [
    "call",
    "commit",
    "delete_own",
    "delete_uncommitted",
    "download",
    "exists",
    "filesystem",
    "identity",
    "list_objects",
    "open_object",
    "read_object",
    "read_versioned",
    "remove",
    "require_swap",
    "stat_object",
    "swap",
    "upload",
]

_T = TypeVar("_T")
_READ_ATTEMPTS = 20
WHOLE_IN_MEMORY = 64 << 20  # an object up to this size is downloaded by one GET into memory
_log = logging.getLogger("trackpoint")


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` (with the options set for it) and the object's path in it.

    Raises:
        InvalidArgumentError: fsspec or the backend of the URL's scheme is not installed, or the
            storage options set for the URL are not what the backend takes.
    """
    try:
        import fsspec  # an optional dependency: imported only when a URL is read
    except ImportError as exc:
        raise InvalidArgumentError(
            f"{url}: reading a URL needs fsspec and the backend of its scheme: pip install 'trackpoint[s3]' (or [gcs])"
        ) from exc
    try:
        return fsspec.core.url_to_fs(url, **options_for(url))
    except (ImportError, ValueError) as exc:
        raise InvalidArgumentError(f"{url}: no fsspec backend for this URL ({exc}); install it, e.g. s3fs") from exc
    except TypeError as exc:  # an option the backend does not take
        raise InvalidArgumentError(
            f"{url}: the storage options set for it are not what its fsspec backend takes ({exc}); fix the "
            "storage_options given for it, or those set with tp.set_storage_options"
        ) from exc


def _version(info: dict[str, Any]) -> str:
    """What tells one version of an object from the next: S3's ETag, GCS's generation, else the time."""
    # GCS's generation before its etag: a write can be made conditional on the generation only.
    return str(info.get("ETag") or info.get("generation") or info.get("etag") or info.get("mtime") or "")


def _modified(info: dict[str, Any]) -> float:
    """An object's last-modified time in seconds since the epoch (0 when the backend gives none)."""
    value = info.get("LastModified") or info.get("updated") or info.get("mtime") or info.get("last_modified")
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return float(value or 0.0)


def _info(url: str, what: str) -> tuple[Any, str, dict[str, Any]]:
    """The backend, the object's path in it, and what a HEAD of the object says."""
    fs, path = filesystem(url)
    # A listing cached by the backend (s3fs fills one on ls) would hide other writers' changes.
    fs.invalidate_cache(path)
    info = call(url, what, lambda: fs.info(path))
    if info.get("type") != "file":
        raise InvalidArgumentError(f"{url} is not an object but a directory; a {what} must be an object")
    return fs, path, info


def stat_object(url: str, what: str = "object") -> os.stat_result:
    """The object's size and version as an ``os.stat_result`` (see the module docstring).

    Raises:
        NotFoundError: No object is at ``url``.
        InvalidArgumentError: ``url`` names a directory (a common prefix), not an object.
    """
    return _stat_of(_info(url, what)[2])


def _stat_of(info: dict[str, Any]) -> os.stat_result:
    size = int(info.get("size") or 0)
    version = _version(info)
    tag = zlib.crc32(version.encode()) if version else 0
    # mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime: the version stands in for the inode.
    return os.stat_result((stat.S_IFREG | 0o444, tag, 0, 1, 0, 0, size, 0, 0, 0))


def identity(stat: os.stat_result) -> tuple[int, int]:
    """What tells versions of an object apart in a :func:`stat_object`: its version's tag and its size."""
    return stat.st_ino, stat.st_size


def exists(url: str) -> bool:
    """Whether an object is at ``url``."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)  # see _info
    try:  # not fs.isfile, which answers False for any failure: a timeout or a refusal is no absence
        return call(url, "object", lambda: fs.info(path)).get("type") == "file"
    except NotFoundError:
        return False


def read_object(url: str, what: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the object at ``url``, refused if larger than ``limit``, and its :func:`stat_object`.

    On S3, one request: the GET's own answer gives the size and ETag, which are then those of
    the very bytes it returns. Elsewhere a HEAD comes first.

    Raises:
        NotFoundError: No object is at ``url``.
        InvalidArgumentError: It is larger than ``limit``, or ``url`` names a directory.
        DataLossError: A request failed.
    """
    got = _get_whole(url, what, limit)
    info = _stat_of(got[1]) if got is not None else stat_object(url, what)
    if got is not None and got[0] is not None:
        return got[0], info
    if info.st_size > limit:
        raise _too_large(url, what, info.st_size, limit)
    fs, path = filesystem(url)
    data = call(url, what, lambda: fs.cat_file(path, start=0, end=info.st_size)) if info.st_size else b""
    return bytes(data), info


def _too_large(url: str, what: str, size: int, limit: int) -> InvalidArgumentError:
    return InvalidArgumentError(f"{url}: {what} of {size} bytes is larger than the {limit} bytes it may hold")


def _get_whole(url: str, what: str, limit: int) -> tuple[bytes | None, dict[str, Any]] | None:
    """On S3, the bytes of the whole object by one GET (None if it is larger than ``limit``:
    its body is then not read) and what that GET's answer says of it (size, ETag, time, as
    :func:`_info` gives them); None on another store, where the caller HEADs first.

    Raises:
        NotFoundError: No object is at ``url``.
        DataLossError: A request failed, or fewer bytes arrived than the answer announced.
    """
    fs, path = filesystem(url)
    where = s3_get.location(fs, path)
    if where is None:
        return None
    from fsspec.asyn import sync

    fs.invalidate_cache(path)  # see _info
    # One request under the user's retry policy (see s3_get), bounded by it.
    data, info = call(url, what, lambda: sync(fs.loop, s3_get.get, fs, *where, limit=limit))
    if data is not None and len(data) != info["size"]:
        raise DataLossError(
            f"{url}: {len(data)} bytes of the {what} arrived of the {info['size']} its answer announced; read it again",
            path=url,
        )
    return data, info


def open_object(url: str, what: str, known: os.stat_result | None = None) -> tuple[int, os.stat_result]:
    """A descriptor of a local, unlinked copy of the object at ``url``, and its :func:`stat_object`.

    The copy is downloaded whole (see the module docstring); the caller closes the
    descriptor, which frees the copy.

    Raises:
        NotFoundError: No object is at ``url``.
        DataLossError: A request failed, or the object changed size while it was fetched.
    """
    fd, info, _ = download(url, what, known)
    return fd, info


def download(
    url: str, what: str, known: os.stat_result | None = None
) -> tuple[int, os.stat_result, os.stat_result | None]:
    """:func:`open_object`, and the version of the bytes downloaded where the GET's own answer
    told it (on S3, an object downloaded into memory), else None: a caller holding ranges of
    the version ``known`` tells from it, with no request of its own, whether the copy is the
    same version.

    Raises:
        As :func:`open_object`.
    """
    info = known if known is not None else stat_object(url, what)  # ``known``: a HEAD the caller made
    fetched: os.stat_result | None = None
    fs, path = filesystem(url)
    handle, name = tempfile.mkstemp(prefix="trackpoint-spool-")
    if info.st_size <= WHOLE_IN_MEMORY:
        # One GET read into memory and written out: half the client's CPU of the streamed
        # download below, which hands the body over 64 KiB at a time (20 MiB: 25 ms against 50).
        try:
            os.unlink(name)
            got = _get_whole(url, what, info.st_size) if info.st_size else None
            if got is not None:
                fetched = _stat_of(got[1])
                if got[0] is None:  # grown since it was listed: another version
                    raise DataLossError(
                        f"{url}: the {what} changed while it was read ({fetched.st_size} bytes now, "
                        f"{info.st_size} listed); read it again",
                        path=url,
                    )
                data = got[0]
            elif info.st_size:
                data = call(url, what, functools.partial(fs.cat_file, path, start=0, end=info.st_size))
            else:
                data = b""
            view, done = memoryview(data), 0
            while done < len(view):
                done += os.write(handle, view[done:])
            os.lseek(handle, 0, os.SEEK_SET)  # at its start, as a descriptor just opened is
        except BaseException:
            os.close(handle)
            raise
        fd = handle
    else:
        os.close(handle)  # the backend opens the name itself
        try:
            # The backend's own download: streamed (no whole-object buffer), in concurrent ranged
            # parts where it has them (s3fs), with its retries. One GET per part matters on servers
            # that read a whole object for every ranged GET (moto).
            call(url, what, functools.partial(fs.get_file, path, name))
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
        finally:
            os.unlink(name)  # nothing to clean up once the descriptor is closed, whatever happens then
    size = os.fstat(fd).st_size
    if size != info.st_size:
        os.close(fd)
        raise DataLossError(
            f"{url}: the {what} changed while it was read ({size} bytes fetched, {info.st_size} listed); read it again",
            path=url,
        )
    return fd, info, fetched


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

    By its S3 ETag (the MD5 of a single-part upload, or of the parts' MD5s for one in the parts
    s3fs makes); with ``compare_bytes``, failing that, by downloading it (for an index, small).
    """
    try:
        fs.invalidate_cache(path)
        info = fs.info(path)
        size = os.path.getsize(local)
        if int(info.get("size") or -1) != size:
            return False
        etag = str(info.get("ETag") or "").strip('"')
        if etag and etag in _s3_etags(local, size):
            return True
        if info.get("md5Hash"):  # GCS: the base64 MD5 of the whole object
            digest = hashlib.md5(usedforsecurity=False)
            with open(local, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
            if base64.b64encode(digest.digest()).decode() == info["md5Hash"]:
                return True
        if compare_bytes:
            with open(local, "rb") as f:
                return bytes(fs.cat_file(path)) == f.read()
    except Exception:  # noqa: BLE001 - cannot tell: treated as another writer's
        return False
    return False


def _s3_etags(local: str, size: int) -> set[str]:
    """The ETags S3 gives ``local`` uploaded in one part, or in the parts s3fs cuts it into."""
    whole = hashlib.md5(usedforsecurity=False)
    parts: list[bytes] = []
    try:
        from s3fs.core import calculate_chunksize

        part = int(calculate_chunksize(size))
    except (ImportError, TypeError):
        part = 50 << 20
    with open(local, "rb") as f:
        while chunk := f.read(part):
            whole.update(chunk)
            parts.append(hashlib.md5(chunk, usedforsecurity=False).digest())
    joined = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
    return {whole.hexdigest(), f"{joined}-{len(parts)}"}


def read_versioned(url: str, what: str, limit: int) -> tuple[bytes, str] | None:
    """The bytes of a small object and the version they are (for :func:`swap`); None if absent.

    Bytes of one version with the tag of another would make a swap either fail for ever or
    overwrite a change unseen. On S3 one GET gives both; elsewhere the version is listed before
    and after the bytes are fetched, and the read is repeated until both agree.

    Raises:
        DataLossError: The object kept changing under every attempt.
    """
    try:
        got = _get_whole(url, what, limit)
    except NotFoundError:
        return None
    if got is not None:  # one GET: the version its answer gives is that of its bytes
        if got[0] is None:
            raise _too_large(url, what, int(got[1]["size"]), limit)
        return got[0], _version(got[1])
    # A retry of trackpoint's own, of a consistency race only (another writer replaced the object
    # between HEAD and GET): every request's transport failure raises, its client's retries spent.
    for _ in range(_READ_ATTEMPTS):
        try:
            fs, path, info = _info(url, what)
        except NotFoundError:
            return None
        size = int(info.get("size") or 0)
        if size > limit:
            raise _too_large(url, what, size, limit)
        try:
            data = bytes(call(url, what, functools.partial(fs.cat_file, path)))
            after = _info(url, what)[2]
        except NotFoundError:
            continue  # replaced or deleted meanwhile: look again
        if _version(after) == _version(info) and len(data) == size:
            return data, _version(info)
    raise DataLossError(f"{url}: the {what} changed under every one of {_READ_ATTEMPTS} reads; try again", path=url)


def _precondition_failed(exc: BaseException) -> bool:
    """Whether a write failed on its condition (S3 412 or 409 ConditionalRequestConflict, GCS 412)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, FileExistsError):
            return True
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return True
        if getattr(seen, "code", None) == 412:  # gcsfs's HttpError
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _protocols(fs: Any) -> set[str]:
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def _condition(fs: Any, url: str, version: str | None) -> dict[str, Any]:
    """The keywords of ``pipe_file`` that make a write conditional on ``version`` (None: absent)."""
    if version is None:
        return {"mode": "create"}
    protocols = _protocols(fs)
    if "s3" in protocols:
        return {"IfMatch": version}
    if "gs" in protocols or "gcs" in protocols:
        return {"ifGenerationMatch": version}  # see _gcs_upload: gcsfs's pipe_file does not take it
    raise InvalidArgumentError(
        f"{url}: replacing an object only if it is unchanged needs a store with conditional writes (s3://, gs://); "
        f"{'/'.join(sorted(protocols))} has none that trackpoint uses, so a state file there could lose another "
        "writer's update. Use Checkpoint.write() with prefixes of your own"
    )


def require_swap(url: str) -> None:
    """Raise InvalidArgumentError unless objects at ``url`` can be swapped (see :func:`swap`)."""
    fs, _ = filesystem(url)
    _condition(fs, url, "")


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
    condition = _condition(fs, url, version)
    try:
        if "ifGenerationMatch" in condition:
            _gcs_upload(fs, path, data, condition["ifGenerationMatch"])
        else:
            fs.pipe_file(path, data, **condition)
    except BaseException as exc:
        if _precondition_failed(exc) or (version is not None and isinstance(exc, FileNotFoundError)):
            return False
        if isinstance(exc, Exception):
            raise translate(url, "object", exc, doing="write") from exc
        raise
    finally:
        fs.invalidate_cache(path)
    return True


def _gcs_upload(fs: Any, path: str, data: bytes, generation: str) -> None:
    """Put ``data`` at ``path`` by one GCS media upload, only if the object is at ``generation``
    (GCS answers 412, which gcsfs raises as FileExistsError, when it is not)."""
    from urllib.parse import quote

    bucket, key, _ = fs.split_path(path)
    fs.call(
        "POST",
        f"{fs._location}/upload/storage/v1/b/{quote(bucket)}/o",
        uploadType="media",
        name=key,
        ifGenerationMatch=generation,
        data=data,
        headers={"Content-Type": "application/octet-stream"},
        json_out=True,
    )


def remove(urls: Sequence[str]) -> None:
    """Delete the objects at ``urls`` in order; those already gone are no error.

    Raises:
        WriteError: An object could not be deleted (those after it are left too).
    """
    for url in urls:
        fs, path = filesystem(url)
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise translate(url, "object", exc, doing="delete") from exc
        finally:
            fs.invalidate_cache(path)


def list_objects(directory: str, prefix: str = "") -> list[tuple[str, float]]:
    """The objects directly under ``directory`` (a URL) whose names begin with ``prefix``, as
    ``(url, last modified)``, sorted.

    On S3 and GCS the store filters by ``prefix`` (one request for a checkpoint's objects,
    however many others the directory holds); elsewhere the directory is listed whole.
    """
    fs, path = filesystem(directory)
    scheme = directory.split("://", 1)[0]
    fs.invalidate_cache(path)  # see _info
    try:
        if prefix and _protocols(fs) & {"s3", "s3a", "gs", "gcs"}:
            entries = list(fs.find(path, maxdepth=1, prefix=prefix, detail=True, refresh=True).values())
        else:
            entries = fs.ls(path, detail=True, refresh=True)
    except FileNotFoundError:
        return []
    except Exception as exc:
        raise translate(directory, "objects", exc, doing="list") from exc
    finally:
        fs.invalidate_cache(path)
    found = []
    for entry in entries:
        name = str(entry["name"])
        # Filtered here too: a backend may answer from a listing of the whole directory.
        if entry.get("type") == "file" and name.rpartition("/")[2].startswith(prefix):
            found.append((name if "://" in name else f"{scheme}://{name}", _modified(entry)))
    return sorted(found)
