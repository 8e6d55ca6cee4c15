"""What differs between object stores, and every use of an fsspec backend's private attributes.

fsspec gives one interface to every store, but a commit without renames needs more than it
offers: a write made conditional on what is there (S3 ``If-None-Match: *`` and ``If-Match``,
GCS ``ifGenerationMatch``), the codes a lost condition comes back with, the checksums that tell
whether an object holds exactly a local file's bytes (S3's ETag, also of a multipart upload;
GCS's ``md5Hash``), which field tells one version from the next, and GETs under the user's
retry policy alone. This module is where those differences live, S3's first, then GCS's;
:mod:`.fsspec_io` and :mod:`.commit` call it and know no provider. It is also the only module
that touches private attributes of a backend (s3fs's ``_call_s3``, gcsfs's ``_location``), so
a new release of one is checked here.

GETs of an S3 object run under one retry policy, the user's: one s3fs ``_call_s3`` per
request. ``_call_s3`` runs the retry policy the storage options configure: s3fs's ``retries``
around botocore's attempts (``config_kwargs={"retries": {"max_attempts": n}}``). s3fs's own
``cat_file`` (a whole object, or a byte range, as ``cat_ranges`` asks for each) runs a second
loop of s3fs's ``retries`` around that call, so a store that does not answer is asked
``retries`` times as often as configured: 25 GETs where 5 were configured, 48.5 s where one
request gives up in 9.7 s (``read_timeout=0.5``, ``max_attempts=1``), hours with botocore's
defaults. Here each GET is one ``_call_s3``, and its failure is final; only a body cut off
after its answer began is asked for again (up to s3fs's ``retries``), since no retry of the
request covers it. Other fsspec backends keep their own calls (:func:`read_ranges` hands them
``cat_ranges``). Every function blocks until its requests end, which the client's policy
bounds: at most its attempts times (its connect and read timeouts plus the pause between
attempts) per request.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from trackpoint.errors import InvalidArgumentError

__all__ = [
    "condition",
    "filters_by_prefix",
    "holds_by_checksum",
    "modified",
    "precondition_failed",
    "put_if",
    "read_ranges",
    "s3_get",
    "s3_location",
    "s3_part_size",
    "s3_request",
    "version",
    "whole_get",
]


# -- Every store: what fs.info says ----------------------------------------------------------


def version(info: dict[str, Any]) -> str:
    """What tells one version of an object from the next: S3's ETag, GCS's generation, else the time.

    Examples:
        >>> version({"ETag": '"abc"', "mtime": 5}), version({"generation": "17", "etag": "CJ"}), version({})
        ('"abc"', '17', '')
    """
    # GCS's generation before its etag: a write can be made conditional on the generation only.
    return str(info.get("ETag") or info.get("generation") or info.get("etag") or info.get("mtime") or "")


def modified(info: dict[str, Any]) -> float:
    """An object's last-modified time in seconds since the epoch (0 when the backend gives none).

    Examples:
        >>> modified({"updated": "1970-01-01T00:01:00Z"}), modified({"mtime": 2.5}), modified({})
        (60.0, 2.5, 0.0)
    """
    value = info.get("LastModified") or info.get("updated") or info.get("mtime") or info.get("last_modified")
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return float(value or 0.0)


def _protocols(fs: Any) -> set[str]:
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def filters_by_prefix(fs: Any) -> bool:
    """Whether the store lists only the names beginning with a prefix (one request for a
    checkpoint's objects, however many others the directory holds): S3 and GCS do."""
    return bool(_protocols(fs) & {"s3", "s3a", "gs", "gcs"})


def holds_by_checksum(info: dict[str, Any], local: str, size: int) -> bool:
    """Whether the checksum the store gives (``info``, of an object of ``size`` bytes) says the
    object holds exactly the bytes of the local file ``local``; False when it cannot tell.

    S3's ETag is the MD5 of a single-part upload, or of the parts' MD5s for one in the parts
    s3fs makes; GCS's ``md5Hash`` is the base64 MD5 of the whole object.
    """
    etag = str(info.get("ETag") or "").strip('"')
    if etag and etag in _s3_etags(local, size):
        return True
    if info.get("md5Hash"):
        digest = hashlib.md5(usedforsecurity=False)
        with open(local, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if base64.b64encode(digest.digest()).decode() == info["md5Hash"]:
            return True
    return False


def precondition_failed(exc: BaseException) -> bool:
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


def condition(fs: Any, url: str, version: str | None) -> dict[str, Any]:
    """The keywords of ``pipe_file`` that make a write conditional on ``version`` (None: absent).

    Raises:
        InvalidArgumentError: The store has no conditional writes that trackpoint uses.
    """
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


def put_if(fs: Any, path: str, data: bytes, keywords: dict[str, Any]) -> None:
    """Write ``data`` at ``path`` on the condition :func:`condition` gave as ``keywords``; a
    lost condition raises an exception :func:`precondition_failed` recognizes."""
    if "ifGenerationMatch" in keywords:
        _gcs_upload(fs, path, data, keywords["ifGenerationMatch"])
    else:
        fs.pipe_file(path, data, **keywords)


# -- S3 ----------------------------------------------------------------------------------------


def s3_part_size(size: int) -> int:
    """The size of the parts s3fs cuts an upload of ``size`` bytes into (when it uses parts)."""
    try:
        from s3fs.core import calculate_chunksize

        return int(calculate_chunksize(size))
    except (ImportError, TypeError):
        return 50 << 20


def _s3_etags(local: str, size: int) -> set[str]:
    """The ETags S3 gives ``local`` uploaded in one part, or in the parts s3fs cuts it into."""
    whole = hashlib.md5(usedforsecurity=False)
    parts: list[bytes] = []
    part = s3_part_size(size)
    with open(local, "rb") as f:
        while chunk := f.read(part):
            whole.update(chunk)
            parts.append(hashlib.md5(chunk, usedforsecurity=False).digest())
    joined = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
    return {whole.hexdigest(), f"{joined}-{len(parts)}"}


def s3_location(fs: Any, path: str) -> tuple[str, str] | None:
    """The bucket and key of ``path`` when ``fs`` is s3fs's and the path names an object (no
    version id: s3fs's own calls handle those); None otherwise."""
    try:
        from s3fs import S3FileSystem
    except ImportError:
        return None
    if not isinstance(fs, S3FileSystem):
        return None
    bucket, key, version_id = fs.split_path(path)
    return (bucket, key) if key and not version_id else None


def s3_request(fs: Any, method: str, **params: Any) -> Any:
    """One request of s3fs's client (``method`` of botocore's S3 client, such as
    ``"upload_part_copy"``) by ``_call_s3``, under the user's retry policy; its answer as a dict.

    Raises:
        Whatever s3fs raises once that policy has given up (a lost condition as FileExistsError,
        a missing object as FileNotFoundError).
    """
    from fsspec.asyn import sync

    return sync(fs.loop, fs._call_s3, method, **params)


def whole_get(fs: Any, path: str, limit: int) -> Callable[[], tuple[bytes | None, dict[str, Any]]] | None:
    """On S3, the one request that GETs the whole object at ``path`` (see :func:`s3_get`; the
    body is not read when larger than ``limit``); None on another store, which HEADs first."""
    where = s3_location(fs, path)
    if where is None:
        return None
    from fsspec.asyn import sync

    return functools.partial(sync, fs.loop, s3_get, fs, *where, limit=limit)


async def s3_get(
    fs: Any, bucket: str, key: str, limit: int | None = None, **params: Any
) -> tuple[bytes | None, dict[str, Any]]:
    """One GET of ``bucket``/``key`` (``params``: more of ``get_object``'s, such as ``Range``) by
    s3fs's ``_call_s3``, and what its answer says of the object: ``type``, ``size`` (the
    answer's length), ``ETag`` and ``LastModified``, as ``fs.info`` names them.

    Args:
        fs: An s3fs filesystem.
        bucket: The bucket.
        key: The object's key.
        limit: The body is not read when the answer announces more bytes than this (None is
            returned for it): the limit bounds memory, not only what is kept.
        **params: Passed to ``get_object``.

    Raises:
        Whatever s3fs raises once the user's retry policy has given up.
    """
    from s3fs.core import S3_RETRYABLE_ERRORS

    attempt = 0
    while True:
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **params)
        body = response["Body"]
        try:
            info = _answer_info(response)
            return (await body.read() if limit is None or info["size"] <= limit else None), info
        except S3_RETRYABLE_ERRORS:
            attempt += 1
            if attempt >= fs.retries:
                raise
        finally:
            body.close()
        await asyncio.sleep(min(1.7**attempt * 0.1, 15))  # s3fs's own pause between attempts


def _answer_info(response: dict[str, Any]) -> dict[str, Any]:
    """What a GET's answer says of the object, in the form of s3fs's ``info``."""
    return {
        "type": "file",
        "size": int(response.get("ContentLength") or 0),
        "ETag": response.get("ETag"),
        "LastModified": response.get("LastModified"),
    }


async def s3_open(fs: Any, bucket: str, key: str, **params: Any) -> tuple[Any, dict[str, Any]]:
    """One GET of ``bucket``/``key`` whose body is left to read (see :func:`s3_drain`), and what
    its answer says of the object, as :func:`s3_get` gives it.

    Raises:
        Whatever s3fs raises once the user's retry policy has given up.
    """
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **params)
    return response["Body"], _answer_info(response)


async def s3_drain(
    fs: Any, bucket: str, key: str, body: Any, etag: str, write: Callable[[int, bytes], None], piece: int = 1 << 20
) -> int:
    """Read the body of an :func:`s3_open` of the whole object to its end, handing each piece to
    ``write(offset, data)`` as it arrives; return how many bytes came.

    A read of the body that fails as s3fs retries (a connection cut) is resumed where it
    stopped, by a GET of the rest on condition that the object still has ``etag`` (S3 answers
    412 otherwise: the bytes of two versions are never joined), as often as s3fs's ``retries``.
    ``write`` may raise to stop the download.

    Raises:
        Whatever s3fs raises once the user's retry policy has given up.
    """
    from s3fs.core import S3_RETRYABLE_ERRORS

    done = attempt = 0
    while True:
        try:
            while data := await body.read(piece):
                write(done, data)
                done += len(data)
            return done
        except S3_RETRYABLE_ERRORS:
            attempt += 1
            if attempt >= fs.retries:
                raise
        finally:
            body.close()
        await asyncio.sleep(min(1.7**attempt * 0.1, 15))  # s3fs's own pause between attempts
        body, _ = await s3_open(fs, bucket, key, Range=f"bytes={done}-", IfMatch=etag)


async def _ranges(fs: Any, bucket: str, key: str, spans: Sequence[tuple[int, int]], in_flight: int) -> list[bytes]:
    """The bytes of each ``[start, end)`` of ``spans``, at most ``in_flight`` GETs under way.

    The first failure cancels the others: the read has failed, and requests left running would
    each wait out the policy for nothing.
    """
    gate = asyncio.Semaphore(in_flight)

    async def one(start: int, end: int) -> bytes:
        async with gate:
            data, _ = await s3_get(fs, bucket, key, Range=f"bytes={start}-{end - 1}")
        return data or b""

    if not spans:
        return []
    tasks = [asyncio.ensure_future(one(start, end)) for start, end in spans]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()  # nothing for those done; the others after a failure (or this call's cancellation)
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            raise failure
    return [task.result() for task in tasks]


def read_ranges(fs: Any, path: str, spans: Sequence[tuple[int, int]], in_flight: int) -> list[bytes]:
    """The bytes of each ``[start, end)`` of ``spans`` (non-empty) of the object at ``path``, at
    most ``in_flight`` requests under way; on S3 one ``_call_s3`` per span (see the module
    docstring), elsewhere the backend's ``cat_ranges``.

    Raises:
        Whatever the backend raises for the first request that failed; the caller translates it.
    """
    where = s3_location(fs, path)
    if where is None:
        starts, ends = [a for a, _ in spans], [b for _, b in spans]
        return list(fs.cat_ranges([path] * len(spans), starts, ends, batch_size=in_flight, on_error="raise"))
    from fsspec.asyn import sync

    return list(sync(fs.loop, _ranges, fs, *where, spans, in_flight))


# -- GCS ---------------------------------------------------------------------------------------


def _gcs_upload(fs: Any, path: str, data: bytes, generation: str) -> None:
    """Put ``data`` at ``path`` by one GCS media upload, only if the object is at ``generation``
    (GCS answers 412, which gcsfs raises as FileExistsError, when it is not): gcsfs's own
    ``pipe_file`` takes no such condition."""
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
