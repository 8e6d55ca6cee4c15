"""Objects behind an fsspec URL, read as a reader reads local files: fetched, ranged, listed, deleted.

An index or state object is fetched whole (:func:`read_object`). A data object is mirrored
in a local sparse file that holds the byte ranges readers asked for, fetched by ranged GETs,
neighbours together, or the whole object by one streamed download when most of it is wanted
(see :mod:`.ranged`; :func:`open_object` is that download). Every checksum is then verified
on the local bytes as for any checkpoint; nothing calls ``fileno``, ``fsync`` or ``mmap`` on
a remote stream. Local copies live in ``tempfile.gettempdir()`` (``TMPDIR``).

A remote object's identity (what tells one version from another at the same URL) is its size
and its ETag (or generation, or modification time): :func:`stat_object` returns it in the
fields of an ``os.stat_result`` that :mod:`~trackpoint._storage.shard_files` compares, so a
checkpoint replaced while it is read raises as a local one does.

Writing, which an object store does without renames, is :mod:`.commit`'s; what differs
between stores is :mod:`.providers`'. Credentials and endpoints come from
:func:`trackpoint.set_storage_options` for a URL prefix, else from fsspec's configuration
(for example the environment variables ``FSSPEC_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``), as
for any fsspec user. A request is tried as often as its client's options say, never more; what
it then raises is translated by :mod:`.store_errors` (a timeout, a refusal, an option the
client does not take).
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile
import zlib
from collections.abc import Sequence
from typing import Any

from trackpoint._storage import providers
from trackpoint._storage.local_files import write_at
from trackpoint._storage.storage_options import options_for
from trackpoint._storage.store_errors import call, translate
from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError

__all__ = [
    "WHOLE_IN_MEMORY",
    "download",
    "exists",
    "filesystem",
    "identity",
    "list_objects",
    "open_object",
    "read_object",
    "read_versioned",
    "remove",
    "stat_object",
    "stat_of",
]

_READ_ATTEMPTS = 20
WHOLE_IN_MEMORY = 64 << 20  # an object up to this size is downloaded by one GET into memory


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
    return stat_of(_info(url, what)[2])


def stat_of(info: dict[str, Any]) -> os.stat_result:
    """:func:`stat_object` from what a HEAD or a GET's answer says of the object."""
    size = int(info.get("size") or 0)
    version = providers.version(info)
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
    info = stat_of(got[1]) if got is not None else stat_object(url, what)
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
    get = providers.whole_get(fs, path, limit)
    if get is None:
        return None
    fs.invalidate_cache(path)  # see _info
    # One request under the user's retry policy (see providers.s3_get), bounded by it.
    data, info = call(url, what, get)
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
                fetched = stat_of(got[1])
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
            write_at(handle, data, 0)  # the offset stays at the start, as a descriptor just opened has it
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


def read_versioned(url: str, what: str, limit: int) -> tuple[bytes, str] | None:
    """The bytes of a small object and the version they are (for :func:`.commit.swap`); None if absent.

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
        return got[0], providers.version(got[1])
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
        if providers.version(after) == providers.version(info) and len(data) == size:
            return data, providers.version(info)
    raise DataLossError(f"{url}: the {what} changed under every one of {_READ_ATTEMPTS} reads; try again", path=url)


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
        if prefix and providers.filters_by_prefix(fs):
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
            found.append((name if "://" in name else f"{scheme}://{name}", providers.modified(entry)))
    return sorted(found)
