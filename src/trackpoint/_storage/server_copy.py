"""Server-side copies of data objects for incremental saves: the store copies, nothing is uploaded.

An incremental save at a URL takes each data object of the previous save whose tensors are all
unchanged as a copy the store makes itself (:func:`copy`), under the new checkpoint's name. A
copy is held to the rules of every other write of a save (see :mod:`.commit`):

- **Nothing is overwritten.** The copy is a multipart upload whose parts are copied from the
  source (``UploadPartCopy``) and whose completion is conditional, ``If-None-Match: *``, as
  the uploads of :func:`.commit.upload` are. A plain ``CopyObject`` is not used: its own
  destination condition is recent on AWS (botocore's model has it) and servers that do not
  know it ignore it (moto 5.2 copies over an existing object and answers 200), whereas S3
  and moto both refuse a conditional completion when an object is there.
- **Only the bytes the previous save wrote are copied.** Each part is copied only if the
  source is still the version the previous save recorded (``x-amz-copy-source-if-match``:
  S3 checks it; moto ignores it). And the parts are cut as the source's were, so the copy's
  ETag follows from the source's: the MD5 of a one-part object's MD5 with ``-1``, or the
  source's own for one in parts (S3's ETags of unencrypted and SSE-S3 objects are those MD5s).
  A copy whose ETag is another holds other bytes (a source replaced behind our back, on a
  server that ignores the source condition), or the store's ETags are no MD5s (SSE-KMS): it
  is deleted again, and the caller writes the tensors instead. So is a source that is gone.

Only S3 (s3fs) copies here; elsewhere (``memory://``, ``gs://``) :func:`can_copy` is False and
an incremental save uploads every data object, which is as correct, only not cheaper.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from trackpoint._storage import providers
from trackpoint._storage.fsspec_io import filesystem
from trackpoint._storage.store_errors import translate
from trackpoint.errors import WriteError

__all__ = ["MAX_PART", "can_copy", "copy", "versions", "withdraw"]

_log = logging.getLogger("trackpoint")

#: The largest part S3 copies by one ``UploadPartCopy``.
MAX_PART = 5 << 30


def can_copy(url: str) -> bool:
    """Whether the store at ``url`` makes the copies of :func:`copy` (S3 through s3fs)."""
    fs, path = filesystem(url)
    return providers.s3_location(fs, path) is not None


def _etag(value: Any) -> str:
    return str(value or "").strip('"')


def plan(size: int, version: str) -> tuple[list[tuple[int, int]], str] | None:
    """The parts (``[start, end)`` spans) that copy an object of ``size`` bytes whose ETag is
    ``version`` so that the copy's ETag is predictable, and that ETag; None when it is not.

    Examples:
        >>> plan(10, '"c4ca4238a0b923820dcc509a6f75849b"')
        ([(0, 10)], '46d1741e8075da4ac72c71d8130fcb71-1')
        >>> plan(10, "not-an-md5") is None
        True
    """
    digest, dash, count = _etag(version).partition("-")
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    if size <= 0 or len(raw) != 16:
        return None
    if not dash:
        return ([(0, size)], hashlib.md5(raw, usedforsecurity=False).hexdigest() + "-1") if size <= MAX_PART else None
    if not count.isdigit():
        return None
    part = size if count == "1" else providers.s3_part_size(size)
    spans = [(start, min(start + part, size)) for start in range(0, size, part)]
    return (spans, _etag(version)) if len(spans) == int(count) and part <= MAX_PART else None


def copy(source: str, version: str, size: int, target: str, what: str) -> str | None:
    """Copy the object at ``source`` to ``target`` on the server (see the module docstring) if
    ``source`` is still ``version`` (``size`` bytes) and nothing is at ``target``; both in one
    bucket, reached with the same options.

    Returns:
        The copy's version; None when no copy was made that holds those bytes (the source is
        gone or another version, or the copy could not be told to be it): write them instead.

    Raises:
        WriteError: An object is at ``target`` (another writer's), or a request failed.
    """
    fs, path = filesystem(target)
    src_fs, src_path = filesystem(source)
    into, source_at = providers.s3_location(fs, path), providers.s3_location(src_fs, src_path)
    # Within one bucket reached with one set of options only: a copy from elsewhere would be
    # made with the target's credentials, which need not reach the source.
    if into is None or source_at is None or src_fs is not fs or into[0] != source_at[0]:
        return None
    planned = plan(size, version)
    if planned is None:
        return None
    spans, expected = planned
    bucket, key = into
    try:
        upload_id = providers.s3_request(fs, "create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
    except Exception as exc:
        raise translate(target, "object", exc, doing="write") from exc
    where = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
    try:
        parts = []
        for number, (start, end) in enumerate(spans, 1):
            ranged = {} if len(spans) == 1 else {"CopySourceRange": f"bytes={start}-{end - 1}"}
            answer = providers.s3_request(
                fs,
                "upload_part_copy",
                **where,
                PartNumber=number,
                CopySource={"Bucket": source_at[0], "Key": source_at[1]},
                CopySourceIfMatch=f'"{_etag(version)}"',  # an entity tag is quoted (RFC 7232)
                **ranged,
            )
            parts.append({"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]})
    except Exception as exc:
        _abort(fs, where, target)
        if isinstance(exc, FileNotFoundError) or providers.precondition_failed(exc):
            return None  # the source is gone, or not the version recorded: its bytes are written instead
        raise translate(target, "object", exc, doing="write") from exc
    got = _complete(fs, path, where, parts, target, expected, what)
    if got != expected:
        _log.info(
            "%s: the copy of %s is not its bytes (ETag %s, not %s); writing them instead", what, source, got, expected
        )
        withdraw([(target, got)], what)
        return None
    return got


def _complete(
    fs: Any, path: str, where: dict[str, Any], parts: list[dict[str, Any]], target: str, expected: str, what: str
) -> str:
    """Complete the copy's upload only if nothing is at ``target``; the ETag of the object made.

    Raises:
        WriteError: Another object is there (one with ``expected`` is taken for this call's own
            completion, retried after its answer was lost, as :func:`.commit.upload` takes its own).
    """
    try:
        answer = providers.s3_request(
            fs, "complete_multipart_upload", **where, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )
        return _etag(answer.get("ETag"))
    except Exception as exc:
        _abort(fs, where, target)
        if not providers.precondition_failed(exc):
            raise translate(target, "object", exc, doing="write") from exc
        try:
            fs.invalidate_cache(path)
            there = _etag(fs.info(path).get("ETag"))
        except Exception:  # noqa: BLE001 - cannot tell: another writer's
            there = ""
        if there and there == expected:
            return there
        raise WriteError(
            f"{target} exists already, so {what} was not committed: another writer is saving to (or has saved) "
            "this name, and objects of an object store are never overwritten by a save; save to a new name",
            path=target,
        ) from exc
    finally:
        fs.invalidate_cache(path)


def _abort(fs: Any, where: dict[str, Any], target: str) -> None:
    """Abort an unfinished upload (its parts hold space until then); a failure is only logged."""
    try:
        providers.s3_request(fs, "abort_multipart_upload", **where)
    except Exception as exc:  # noqa: BLE001 - a store's lifecycle rule clears what is left
        _log.warning("%s: could not abort the unfinished copy: %s", target, exc)


def withdraw(copies: Sequence[tuple[str, str]], context: str) -> None:
    """Delete the copies of ``(url, version)`` pairs, each only while it is still that version:
    one another writer put over it is left alone. A failure is logged (nothing reads an
    object no index names; a later save clears it)."""
    for url, version in copies:
        fs, path = filesystem(url)
        try:
            fs.invalidate_cache(path)
            if _etag(fs.info(path).get("ETag")) != _etag(version):
                _log.warning("%s: left %s in place: it is not the copy this save made", context, url)
                continue
            fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001 - see the docstring
            _log.warning("%s: could not delete the uncommitted copy %s: %s", context, url, exc)
        finally:
            fs.invalidate_cache(path)


def versions(prefix: str) -> dict[str, tuple[str, int]]:
    """The version (ETag) and size of each object of the checkpoint at URL ``prefix`` (its name
    and a dot, then anything), by one listing, keyed by URL.

    Raises:
        WriteError: The listing failed.
    """
    directory, _, name = prefix.rpartition("/")
    fs, path = filesystem(directory)
    scheme = prefix.split(":", 1)[0]
    try:
        found = fs.find(path, maxdepth=1, prefix=name + ".", detail=True, refresh=True)
    except Exception as exc:
        raise translate(prefix, "objects", exc, doing="write") from exc
    finally:
        fs.invalidate_cache(path)
    return {
        f"{scheme}://{entry['name']}": (_etag(entry.get("ETag")), int(entry.get("size") or 0))
        for entry in found.values()
        if entry.get("type") == "file"
    }
