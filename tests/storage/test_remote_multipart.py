"""Data objects of 100 MiB and more go up as S3 multipart uploads (s3fs cuts parts of 50 MiB
and sends them concurrently): the bytes are a local save's, the object's multipart ETag tells it
as this writer's own (as a lost answer needs), a lost answer to the completion commits it once, and
a part that keeps failing aborts the upload, leaving nothing (moto's server behind the proxy)."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp

pytestmark = pytest.mark.slow  # 103 MiB uploads in parts through the proxy: seconds each

KEY = "model/big/.ATTRIBUTES/VARIABLE_VALUE"
SIZE = 13_500_000  # float64: 103 MiB, three parts of s3fs's 50 MiB


def _model(value: float) -> tp.Module:
    m = tp.Module()
    m.big = tp.Variable(np.full(SIZE, value))
    return m


def _multipart_requests(proxy) -> tuple[list[str], list[str], list[str]]:
    """The queries of the create, part and complete requests of the data object's uploads."""
    data = [(method, query) for method, path, query in proxy.requests if ".data-" in path]
    created = [q for m, q in data if m == "POST" and q.startswith("uploads")]
    parts = [q for m, q in data if m == "PUT" and "partNumber=" in q]
    completed = [q for m, q in data if m == "POST" and "uploadId=" in q]
    return created, parts, completed


def _uploads(s3, bucket: str) -> list[dict]:
    return s3.call_s3("list_multipart_uploads", Bucket=bucket[5:]).get("Uploads", [])


def test_a_large_data_object_goes_up_in_parts_with_a_local_saves_bytes(tmp_path, bucket, s3, proxy) -> None:
    model = _model(1.5)
    url = tp.Checkpoint(model=model).write(f"{bucket}/run/ckpt-1")
    created, parts, completed = _multipart_requests(proxy)
    assert len(created) == 1 and len({q for q in parts}) == 3 and len(completed) == 1, proxy.requests
    local = tp.Checkpoint(model=model).write(str(tmp_path / "ckpt-1"))
    name = ".data-00000-of-00001"
    s3.invalidate_cache()
    assert s3.info(url[5:] + name)["ETag"].strip('"').endswith("-3")
    with open(local + name, "rb") as f:
        assert s3.cat_file(url[5:] + name) == f.read()
    # What tells a lost answer's object as this writer's own: its multipart ETag, of the parts s3fs cut.
    from trackpoint._storage import commit

    assert commit._holds(s3, url[5:] + name, local + name, compare_bytes=False)
    assert tp.load_variable(url, KEY)[-1] == 1.5
    assert _uploads(s3, bucket) == []


def test_a_completion_whose_answer_is_lost_is_recognised_as_ours(bucket, s3, proxy) -> None:
    """The upload is completed but the connection drops before the answer: the write is retried
    and the checkpoint committed once, with no upload left open."""
    dropped: list[str] = []

    def fault(method: str, path: str, query: str) -> str | None:
        if method == "POST" and ".data-" in path and "uploadId=" in query and not dropped:
            dropped.append(path)
            return "drop-after"
        return None

    proxy.fault = fault
    url = tp.Checkpoint(model=_model(2.5)).write(f"{bucket}/run/ckpt-1")
    proxy.fault = None
    assert dropped
    assert tp.load_variable(url, KEY)[0] == 2.5
    assert _uploads(s3, bucket) == []


def test_a_part_that_keeps_failing_aborts_the_upload_and_commits_nothing(bucket, s3, proxy, monkeypatch) -> None:
    import fsspec.config

    monkeypatch.setitem(fsspec.config.conf["s3"], "config_kwargs", {"retries": {"max_attempts": 2}})

    def fault(method: str, path: str, query: str) -> int | None:
        return 500 if method == "PUT" and "partNumber=2&" in query + "&" else None

    proxy.fault = fault
    with pytest.raises(tp.errors.WriteError, match="ckpt-1"):
        tp.Checkpoint(model=_model(3.5)).write(f"{bucket}/run/ckpt-1")
    proxy.fault = None
    s3.invalidate_cache()
    assert s3.find(bucket[5:]) == []
    assert _uploads(s3, bucket) == []
