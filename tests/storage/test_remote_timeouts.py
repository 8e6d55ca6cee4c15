"""A store that accepts connections and never answers (the proxy in front of moto's server
stalls every request, every PUT, or every GET of a data object): with the user's short
``read_timeout`` and retries, a restore, a reader, a state read and a save raise
``DeadlineExceededError`` naming the URL and the remedy, and take no longer than s3fs alone
takes to give up in the same setup: one retry policy (s3fs's and botocore's, as the options set
them), no second loop around it, and no timeout taken for "not found" (which would read the
index again, or take a prefix for a directory).

The bound is on a hang, not a timing: 1.5 times what s3fs alone takes, plus 3 seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import trackpoint as tp

pytestmark = pytest.mark.slow

# What a user sets to give up soon: botocore's read timeout and its attempts per s3fs attempt.
SHORT = {"config_kwargs": {"read_timeout": 0.5, "retries": {"max_attempts": 1}}}
# And s3fs's attempts around each request (an attribute: S3FileSystem takes no such option). Its
# default, 5, spends most of each test's time in s3fs's backoff between attempts.
S3FS_RETRIES = 2
KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def _model(value: float) -> tp.Module:
    m = tp.Module()
    m.w = tp.Variable(np.full((4, 4), value, np.float32))
    return m


@pytest.fixture()
def stalled(bucket: str, proxy, monkeypatch) -> Iterator[dict[str, Any]]:
    """A directory ``run`` holding ckpt-1 and its state object, saved through the proxy; then
    the proxy stalls every request. Yields the options the URLs use (the proxy, ``SHORT``); s3fs
    makes ``S3FS_RETRIES`` attempts."""
    import s3fs

    monkeypatch.setattr(s3fs.S3FileSystem, "retries", S3FS_RETRIES)
    options = {"endpoint_url": proxy.endpoint, "key": "testing", "secret": "testing", **SHORT}
    tp.set_storage_options(bucket, **options)
    try:
        tp.CheckpointManager(tp.Checkpoint(model=_model(1.0)), f"{bucket}/run", max_to_keep=2).save()
        proxy.fault = lambda method, path, query: "stall"
        yield options
    finally:
        proxy.fault = None
        tp.set_storage_options(bucket)


def _s3fs_alone(options: dict[str, Any], action: Callable[[Any], object]) -> float:
    """Seconds s3fs alone, with ``options``, takes to give up on ``action`` (it must time out)."""
    import s3fs
    from botocore.exceptions import ReadTimeoutError

    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    start = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        action(fs)
    return time.monotonic() - start


def _gives_up_in_time(url: str, baseline: float, action: Callable[[], object]) -> tp.errors.DeadlineExceededError:
    start = time.monotonic()
    with pytest.raises(tp.errors.DeadlineExceededError) as caught:
        action()
    took = time.monotonic() - start
    assert took <= 1.5 * baseline + 3.0, f"{took:.1f} s against s3fs's {baseline:.1f} s"
    error = caught.value
    assert isinstance(error, TimeoutError) and isinstance(error, tp.errors.CheckpointError)
    message = str(error)
    assert url in message and "read_timeout" in message and "endpoint" in message, message
    assert "no such" not in message and "not found" not in message.lower(), message
    return error


def test_a_restore_from_a_stalled_store_times_out_as_s3fs_does(bucket, stalled) -> None:
    index = f"{bucket}/run/ckpt-1.index"
    baseline = _s3fs_alone(stalled, lambda fs: fs.cat_file(index[5:]))
    _gives_up_in_time(index, baseline, lambda: tp.Checkpoint(model=_model(0.0)).restore(f"{bucket}/run/ckpt-1"))


def test_a_reader_of_a_stalled_store_times_out_as_s3fs_does(bucket, stalled) -> None:
    index = f"{bucket}/run/ckpt-1.index"
    baseline = _s3fs_alone(stalled, lambda fs: fs.cat_file(index[5:]))
    _gives_up_in_time(index, baseline, lambda: tp.load_checkpoint(f"{bucket}/run/ckpt-1"))


def test_the_state_of_a_stalled_store_times_out_as_s3fs_does(bucket, stalled) -> None:
    state = f"{bucket}/run/checkpoint"
    baseline = _s3fs_alone(stalled, lambda fs: fs.cat_file(state[5:]))
    _gives_up_in_time(state, baseline, lambda: tp.latest_checkpoint(f"{bucket}/run"))


def test_a_save_to_a_stalled_store_times_out_as_s3fs_does(bucket, stalled) -> None:
    baseline = _s3fs_alone(stalled, lambda fs: fs.ls(f"{bucket[5:]}/run", refresh=True))
    _gives_up_in_time(f"{bucket}/run", baseline, lambda: tp.Checkpoint(model=_model(2.0)).save(f"{bucket}/run/ckpt"))


def test_a_save_whose_uploads_stall_times_out_and_commits_nothing(bucket, stalled, proxy, s3) -> None:
    """Listings and reads answer; every PUT stalls (after its ``100 Continue``)."""
    proxy.fault = lambda method, path, query: "stall" if method == "PUT" else None
    baseline = _s3fs_alone(stalled, lambda fs: fs.pipe_file(f"{bucket[5:]}/run/probe", b"x"))
    prefix = f"{bucket}/run/ckpt-9"
    _gives_up_in_time(prefix, baseline, lambda: tp.Checkpoint(model=_model(3.0)).write(prefix))
    proxy.fault = None
    s3.invalidate_cache()
    assert not s3.exists(f"{prefix[5:]}.index")


def _large(value: float) -> tp.Module:
    """A model whose data object is mostly one 4 MB tensor: a restore reads the object graph, a
    small part of it, by a ranged GET first."""
    m = _model(value)
    m.big = tp.Variable(np.full(1 << 20, value, np.float32))
    return m


def _one_ranged_get(fs: Any, url: str) -> object:
    """One ranged GET by s3fs's ``_call_s3``: s3fs's retries around botocore's attempts, once."""
    from fsspec.asyn import sync

    bucket, key, _ = fs.split_path(url)
    return sync(fs.loop, fs._call_s3, "get_object", Bucket=bucket, Key=key, Range="bytes=0-1023")


def test_a_restore_whose_data_reads_stall_times_out_as_one_s3fs_request_does(bucket, stalled, proxy) -> None:
    """The index answers; every GET of the data object stalls. The restore's first ranged GET (the
    object graph's range) is asked as often as one s3fs request is, under the user's policy, not
    as s3fs's ranged cat_file asks it (its retry loop around that request's own: 5 x 5 attempts)."""
    proxy.fault = None
    prefix = tp.Checkpoint(model=_large(1.0)).write(f"{bucket}/run/ckpt-5")
    data = f"{prefix}.data-00000-of-00001"
    proxy.fault = lambda method, path, query: "stall" if method == "GET" and ".data-" in path else None
    proxy.gets.clear()
    baseline = _s3fs_alone(stalled, lambda fs: _one_ranged_get(fs, data))
    asked = len(proxy.gets)
    proxy.gets.clear()
    _gives_up_in_time(data, baseline, lambda: tp.Checkpoint(model=_large(0.0)).restore(prefix))
    gets = [header for path, header in proxy.gets if ".data-" in path]
    assert gets and all(header is not None and header.startswith("bytes=") for header in gets), gets
    assert len(gets) <= asked, f"{len(gets)} GETs of the data object where s3fs alone asks {asked} times"


# The download process only: the thread's download waits in the same place (RangedObject._await). The
# process makes its own filesystem: asking no more often than s3fs alone shows it took the retries.
@pytest.mark.parametrize("downloader", ["process"], indirect=True)
def test_a_repeated_restore_whose_download_stalls_times_out_as_one_s3fs_request_does(
    bucket, stalled, proxy, downloader
) -> None:
    """The restore into the same objects again downloads the data object ahead, by a GET that
    stalls: the restore gives up as one s3fs request does, with no second request after it."""
    proxy.fault = None
    prefix = tp.Checkpoint(model=_model(1.0)).write(f"{bucket}/run/ckpt-6")
    ckpt = tp.Checkpoint(model=_model(0.0))
    ckpt.read(prefix).assert_consumed()
    data = f"{prefix}.data-00000-of-00001"
    proxy.fault = lambda method, path, query: "stall" if method == "GET" and ".data-" in path else None
    proxy.gets.clear()
    baseline = _s3fs_alone(stalled, lambda fs: fs.cat_file(data[5:]))
    asked = len(proxy.gets)
    proxy.gets.clear()
    _gives_up_in_time(data, baseline, lambda: ckpt.read(prefix))
    gets = [header for path, header in proxy.gets if ".data-" in path]
    assert gets and len(gets) <= asked, f"{len(gets)} GETs of the data object where s3fs alone asks {asked} times"
