"""The download process of restores from S3: it runs the whole downloads, and what happens when it cannot or dies.

moto's S3 server (behind the test proxy where the body must come slowly), real helper processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage import download_process, fsspec_io, ranged, ranged_stream

s3fs = pytest.importorskip("s3fs", reason="s3fs is in the test extra")


def _model(value: float) -> tp.Module:
    m = tp.Module()
    m.big = tp.Variable(np.full(4_000_000, value, np.float32))  # 16 MB
    m.small = [tp.Variable(np.full(256, value + i, np.float32)) for i in range(500)]
    return m


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:  # a zombie of ours is gone too
            if f.read().split(") ")[-1].startswith("Z"):
                return True
        time.sleep(0.05)
    return False


def test_the_download_process_brings_every_byte_of_a_repeated_restore(bucket, s3) -> None:
    pid = download_process.started(60.0)
    assert pid is not None
    first = tp.Checkpoint(model=_model(1.0)).write(f"{bucket}/run/ckpt-1")
    second = tp.Checkpoint(model=_model(2.0)).write(f"{bucket}/run/ckpt-2")
    restored = _model(0.0)
    ckpt = tp.Checkpoint(model=restored)
    ckpt.read(first).assert_consumed()
    begun = download_process.begun()
    ckpt.read(second).assert_consumed()
    assert download_process.begun() - begun == 1 and download_process.helper_pid() == pid
    assert (restored.big.numpy() == 2.0).all()
    assert [float(v.numpy()[0]) for v in restored.small] == [2.0 + i for i in range(500)]


def test_a_killed_download_process_leaves_the_reads_to_fetch_the_rest(bucket, proxy, s3) -> None:
    """The helper killed mid-download: the bytes it brought stay, the read fetches the others
    itself, and the next download starts a new helper."""
    url = tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/run/ckpt-1") + ".data-00000-of-00001"
    pid = download_process.started(60.0)
    assert pid is not None
    proxy.trickle = (1 << 20, 0.2)  # 16 MB in about 3 s
    mirror = ranged.RangedObject(url, "data shard")
    try:
        begun = download_process.begun()
        mirror.prefetch()
        assert download_process.begun() - begun == 1
        deadline = time.monotonic() + 30
        while not proxy.gets and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # some pieces in
        os.kill(pid, signal.SIGKILL)
        assert _gone(pid, 10)
        proxy.trickle = None
        mirror.ensure(None)  # waits for the stream to end, then fetches what is missing
        held = os.pread(mirror.fd, mirror.size, 0)
    finally:
        proxy.trickle = None
        mirror.close()
    assert held == s3.cat_file(url[5:])
    new = download_process.started(60.0)
    assert new is not None and new != pid


def test_the_download_process_dies_with_its_parent(s3_endpoint) -> None:
    code = textwrap.dedent(
        """
        import sys, time
        from trackpoint._storage import download_process
        print(download_process.started(60.0), flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        helper = int(parent.stdout.readline())
        os.kill(helper, 0)  # it runs
    finally:
        parent.kill()
        parent.wait(timeout=30)
    assert _gone(helper, 10), "the download process outlived its parent"


def test_a_filesystem_the_process_cannot_make_is_downloaded_on_a_thread(bucket, s3_endpoint) -> None:
    class Custom(s3fs.S3FileSystem):
        pass

    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing")
    assert download_process._sendable(fs) is not None
    custom = Custom(endpoint_url=s3_endpoint, key="testing", secret="testing", skip_instance_cache=True)
    assert download_process._sendable(custom) is None  # a subclass may behave otherwise
    unsendable = s3fs.S3FileSystem(endpoint_url=s3_endpoint, session=object(), skip_instance_cache=True)
    assert download_process._sendable(unsendable) is None  # an option that is no JSON
    assert download_process.start(bucket, "data shard", custom, ("b", "k"), -1, None, None) is None


def test_an_object_replaced_before_the_process_gets_it_is_reported_changed(bucket, s3) -> None:
    """A prefetch names the version a HEAD read; the process's GET finds another: the reads raise."""
    assert download_process.started(60.0) is not None
    url = tp.Checkpoint(model=_model(4.0)).write(f"{bucket}/run/ckpt-1") + ".data-00000-of-00001"
    mirror = ranged.RangedObject(url, "data shard")
    try:
        s3.pipe_file(url[5:], bytes(mirror.size))  # same size, another version
        mirror.prefetch()
        with pytest.raises(tp.errors.DataLossError, match="changed while it was read"):
            mirror.ensure(None)
    finally:
        mirror.close()
    assert fsspec_io.identity(fsspec_io.stat_object(url, "data shard")) != fsspec_io.identity(mirror.stat)


def test_the_process_makes_its_client_in_the_environment_of_the_moment(bucket, s3_endpoint, monkeypatch) -> None:
    """Credentials taken out of this process's environment after the helper started are gone
    for its next download too: it answers as a thread's download would, with no credentials."""
    assert download_process.started(60.0) is not None
    url = tp.Checkpoint(model=_model(1.0)).write(f"{bucket}/run/ckpt-1") + ".data-00000-of-00001"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, skip_instance_cache=True)
    spool = os.open("/dev/null", os.O_WRONLY)
    try:
        download = download_process.start(url, "data shard", fs, tuple(url[5:].split("/", 1)), spool, None, None)
        assert download is not None
        with pytest.raises(tp.errors.PermissionDeniedError, match="credentials"):
            download.answer(60.0)
    finally:
        os.close(spool)


def test_a_download_that_ended_before_it_was_followed_ends_its_stream_at_once() -> None:
    """The helper may report a download's end before the reader follows it (a small object, an
    answer of another version), while the reader holds its object's lock (ensure, prefetch):
    the end is passed on at once, on that thread, without waiting for the lock it holds."""
    import threading

    mirror = ranged.RangedObject(
        "s3://b/ckpt.data-00000-of-00001", "data shard", os.stat_result((0,) * 6 + (10, 0, 0, 0))
    )
    download = download_process.Download(helper=None, number=0, url=mirror.url)  # type: ignore[arg-type]
    download._ended(10, None)
    stream = ranged_stream.Stream()
    done = threading.Event()

    def follow() -> None:
        with mirror._lock:
            mirror._stream = stream
            mirror._attach(download, stream)
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    assert done.wait(10), "following a download that had ended waited for the lock its own thread held"
    assert stream.done and mirror.whole
