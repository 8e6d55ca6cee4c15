"""GETs of an S3 object under one retry policy, the user's: one s3fs ``_call_s3`` per request.

s3fs's ``_call_s3`` runs the retry policy the storage options configure: s3fs's ``retries``
around botocore's attempts (``config_kwargs={"retries": {"max_attempts": n}}``). s3fs's own
``cat_file`` (a whole object, or a byte range, as ``cat_ranges`` asks for each) runs a second
loop of s3fs's ``retries`` around that call, so a store that does not answer is asked
``retries`` times as often as configured: 25 GETs where 5 were configured, 48.5 s where one
request gives up in 9.7 s (``read_timeout=0.5``, ``max_attempts=1``), hours with botocore's
defaults. Here each GET is one ``_call_s3``, and its failure is final; only a body cut off
after its answer began is asked for again (up to s3fs's ``retries``), since no retry of the
request covers it.

Other fsspec backends keep their own calls (:func:`read_ranges` hands them ``cat_ranges``).
Every function blocks until its requests end, which the client's policy bounds: at most its
attempts times (its connect and read timeouts plus the pause between attempts) per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

__all__ = ["get", "location", "read_ranges"]


def location(fs: Any, path: str) -> tuple[str, str] | None:
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


async def get(
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
            info = {
                "type": "file",
                "size": int(response.get("ContentLength") or 0),
                "ETag": response.get("ETag"),
                "LastModified": response.get("LastModified"),
            }
            return (await body.read() if limit is None or info["size"] <= limit else None), info
        except S3_RETRYABLE_ERRORS:
            attempt += 1
            if attempt >= fs.retries:
                raise
        finally:
            body.close()
        await asyncio.sleep(min(1.7**attempt * 0.1, 15))  # s3fs's own pause between attempts


async def _ranges(fs: Any, bucket: str, key: str, spans: Sequence[tuple[int, int]], in_flight: int) -> list[bytes]:
    """The bytes of each ``[start, end)`` of ``spans``, at most ``in_flight`` GETs under way.

    The first failure cancels the others: the read has failed, and requests left running would
    each wait out the policy for nothing.
    """
    gate = asyncio.Semaphore(in_flight)

    async def one(start: int, end: int) -> bytes:
        async with gate:
            data, _ = await get(fs, bucket, key, Range=f"bytes={start}-{end - 1}")
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
    where = location(fs, path)
    if where is None:
        starts, ends = [a for a, _ in spans], [b for _, b in spans]
        return list(fs.cat_ranges([path] * len(spans), starts, ends, batch_size=in_flight, on_error="raise"))
    from fsspec.asyn import sync

    return list(sync(fs.loop, _ranges, fs, *where, spans, in_flight))
