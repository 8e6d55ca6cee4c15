"""Reading from an object store fetches only what is read: one tensor of a large checkpoint by a
ranged GET of about its size, neighbours together, a whole restore by one download; bytes of two
versions of an object are never mixed (moto's S3 server behind the logging proxy)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage import download_process, ranged

pytestmark = (
    pytest.mark.slow
)  # a restore through the S3 server and its proxy per test, counting requests: about a second each


def _model(value: float = 1.0, small: range = range(2000)) -> tp.Module:
    m = tp.Module()
    m.big = tp.Variable(np.full(4_000_000, value, np.float32))  # 16 MB, first in the data file
    m.small = {f"t{i:04d}": tp.Variable(np.full(256, value + i, np.float32)) for i in small}  # 1 KiB each
    return m


def _key(name: str) -> str:
    return f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE"


def _data_gets(proxy, s3) -> list[str | None]:
    """The Range header of each GET of a data object; None for a GET of the whole object (with no
    Range, or one from its first byte to its last)."""
    found = []
    for path, header in proxy.gets:
        if ".data-" in path:
            size = s3.info(path.lstrip("/"))["size"]
            found.append(None if header in (None, f"bytes=0-{size - 1}") else header)
    return found


def _range_bytes(header: str) -> int:
    first, last = header.removeprefix("bytes=").split("-")
    return int(last) - int(first) + 1


def test_one_tensor_is_one_ranged_get_of_about_its_size(bucket, proxy, s3) -> None:
    url = tp.Checkpoint(model=_model()).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    value = tp.load_variable(url, _key("small/t0007"))
    np.testing.assert_array_equal(value, np.full(256, 8.0, np.float32))
    (header,) = _data_gets(proxy, s3)  # one request for the tensor, none for the 16 MB beside it
    assert header is not None and _range_bytes(header) == 1024


def test_a_partial_restore_fetches_neighbours_together(bucket, proxy, s3) -> None:
    """Every tenth of 2000 small tensors: a few ranged GETs (gaps under ranged.MAX_GAP are
    bridged), not 200, and not the 16 MB tensor."""
    url = tp.Checkpoint(model=_model(2.0)).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    partial = tp.Module()
    partial.small = _model(0.0, small=range(0, 2000, 10)).small
    tp.Checkpoint(model=partial).read(url).assert_existing_objects_matched().expect_partial()
    assert [float(v.numpy()[0]) for v in partial.small.values()] == [2.0 + i for i in range(0, 2000, 10)]
    gets = _data_gets(proxy, s3)
    assert all(h is not None for h in gets) and len(gets) <= 3, gets
    assert sum(_range_bytes(h) for h in gets) < 3 << 20


def test_a_whole_restore_downloads_each_data_object_once(bucket, proxy, s3) -> None:
    url = tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    restored = _model(0.0)
    tp.Checkpoint(model=restored).read(url).assert_consumed()
    assert float(restored.big.numpy()[-1]) == 3.0 and float(restored.small["t1999"].numpy()[0]) == 3.0 + 1999
    # The object graph (a string tensor at the end of the data), then the whole object in one GET.
    (graph, whole) = _data_gets(proxy, s3)
    assert graph is not None and _range_bytes(graph) < 1 << 20 and whole is None


def test_bytes_of_a_replaced_object_are_not_mixed_with_the_first(bucket, s3) -> None:
    url = tp.Checkpoint(model=_model(4.0, small=range(20))).write(f"{bucket}/run/ckpt-1")
    reader = tp.load_checkpoint(url)
    assert float(reader.get_tensor(_key("small/t0000"))[0]) == 4.0
    data = f"{url[5:]}.data-00000-of-00001"
    s3.pipe_file(data, bytes(s3.info(data)["size"]))  # replaced by zeros of the same size
    with pytest.raises(tp.errors.DataLossError, match="deleted or replaced while being read"):
        reader.get_tensor(_key("small/t0005"))


def test_spans_merge_and_subtract() -> None:
    assert ranged._merge([(10, 20), (0, 5), (21, 30), (100, 101)], gap=1) == [(0, 5), (10, 30), (100, 101)]
    assert ranged._subtract([(0, 10), (20, 30)], [(2, 4), (8, 25)]) == [(0, 2), (4, 8), (25, 30)]
    assert ranged._blocks([(0, 10)], 4) == [(0, 4), (4, 8), (8, 10)]


def test_verify_and_convert_fetch_the_data_together_not_tensor_by_tensor(bucket, proxy, s3) -> None:
    url = tp.Checkpoint(model=_model(5.0, small=range(500))).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    assert tp.verify_checkpoint(url) == []
    assert len(_data_gets(proxy, s3)) <= 2, _data_gets(proxy, s3)  # not 500
    proxy.gets.clear()
    tp.convert(url, f"{bucket}/hf")
    assert len(_data_gets(proxy, s3)) <= 2, _data_gets(proxy, s3)


def test_a_repeated_restore_downloads_the_data_at_once_without_a_request_for_the_graph(
    bucket, proxy, s3, downloader
) -> None:
    """The restore into the same objects again (an evaluator reading each new checkpoint) reads
    most of the checkpoint as the last one did: the whole object is downloaded from the start,
    and the object graph is read from that copy rather than by a ranged GET of its own."""
    first = tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/run/ckpt-1")
    second = tp.Checkpoint(model=_model(5.0)).write(f"{bucket}/run/ckpt-2")
    restored = _model(0.0)
    ckpt = tp.Checkpoint(model=restored)
    ckpt.read(first).assert_consumed()
    proxy.gets.clear()
    begun = download_process.begun()
    ckpt.read(second).assert_consumed()
    assert float(restored.big.numpy()[-1]) == 5.0 and float(restored.small["t1999"].numpy()[0]) == 5.0 + 1999
    assert _data_gets(proxy, s3) == [None]
    assert download_process.begun() - begun == (1 if downloader == "process" else 0)


def test_a_repeated_restore_begins_the_data_download_before_the_index_is_parsed(
    bucket, proxy, s3, downloader, monkeypatch
) -> None:
    """The last restore into these objects read most of a one-shard checkpoint: the next begins
    that shard's download as soon as the index's bytes are in, before they are parsed."""
    from trackpoint._format import bundle_reader
    from trackpoint._storage.object_storage import ObjectStorage

    first = tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/run/ckpt-1")
    second = tp.Checkpoint(model=_model(5.0)).write(f"{bucket}/run/ckpt-2")
    restored = _model(0.0)
    ckpt = tp.Checkpoint(model=restored)
    events: list[str] = []
    read_index, start_data = bundle_reader.read_index, ObjectStorage.start_data

    def parsing(*args, **kwargs):
        events.append("index parsed")
        return read_index(*args, **kwargs)

    def starting(self, path, *args, **kwargs):
        events.append(f"download of {path.rsplit('/', 1)[-1]}")
        return start_data(self, path, *args, **kwargs)

    monkeypatch.setattr(bundle_reader, "read_index", parsing)
    monkeypatch.setattr(ObjectStorage, "start_data", starting)
    ckpt.read(first).assert_consumed()
    assert events == ["index parsed"]  # a first restore fetches what its walk asks for
    events.clear()
    proxy.requests.clear()
    ckpt.read(second).assert_consumed()
    assert events == ["download of ckpt-2.data-00000-of-00001", "index parsed"]
    assert float(restored.big.numpy()[-1]) == 5.0 and float(restored.small["t1999"].numpy()[0]) == 5.0 + 1999
    assert _requests_for(proxy, "ckpt-2.data-00000-of-00001") == ["GET"]
    assert _requests_for(proxy, "ckpt-2.index") == ["GET"]


def test_a_download_begun_for_one_shard_is_let_go_when_the_index_names_two(bucket, proxy, s3, downloader) -> None:
    """The last restore read a one-shard checkpoint, the next is of two shards: the early GET (of
    a one-shard name that is not there) is let go, and the two shards are read."""
    restored = _model(0.0)
    ckpt = tp.Checkpoint(model=restored)
    ckpt.read(tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/run/ckpt-1")).assert_consumed()
    two = tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(8 << 20))
    url = tp.Checkpoint(model=_model(7.0)).write(f"{bucket}/run/ckpt-2", options=two)
    shards = [name for name in s3.find(f"{bucket[5:]}/run") if "ckpt-2.data-" in name]
    assert len(shards) > 1 and not any(name.endswith("-of-00001") for name in shards), shards
    proxy.gets.clear()
    ckpt.read(url).assert_consumed()
    assert float(restored.big.numpy()[-1]) == 7.0 and float(restored.small["t1999"].numpy()[0]) == 7.0 + 1999
    # The early GET was sent (by the download process maybe after the restore: waited for, 10 s at most).
    deadline = time.monotonic() + 10.0
    while not any(path.endswith("ckpt-2.data-00000-of-00001") for path, _ in proxy.gets):
        assert time.monotonic() < deadline, proxy.gets
        time.sleep(0.05)


def test_a_repeated_partial_restore_still_fetches_only_its_part(bucket, proxy, s3) -> None:
    url = tp.Checkpoint(model=_model(2.0)).write(f"{bucket}/run/ckpt-1")
    partial = tp.Module()
    partial.small = _model(0.0, small=range(0, 2000, 10)).small
    ckpt = tp.Checkpoint(model=partial)
    ckpt.read(url).expect_partial()
    proxy.gets.clear()
    ckpt.read(url).assert_existing_objects_matched().expect_partial()
    gets = _data_gets(proxy, s3)
    assert gets and all(h is not None for h in gets) and sum(_range_bytes(h) for h in gets) < 3 << 20, gets


def test_a_download_begun_ahead_that_fails_is_made_again_by_the_read(bucket, proxy, s3, downloader) -> None:
    url = tp.Checkpoint(model=_model(6.0)).write(f"{bucket}/run/ckpt-1")
    restored = _model(0.0)
    ckpt = tp.Checkpoint(model=restored)
    ckpt.read(url)
    restored.big.assign(np.zeros(4_000_000, np.float32))
    failed: list[str] = []

    def fault(method: str, path: str, query: str) -> int | None:
        if method == "GET" and ".data-" in path and not failed:
            failed.append(path)
            return 404  # not retried by s3fs: the download begun ahead fails
        return None

    proxy.fault = fault
    proxy.gets.clear()
    ckpt.read(url).assert_consumed()
    assert failed and float(restored.big.numpy()[0]) == 6.0
    # The failed download, then the reads' own whole download: the repeat reads the values before
    # the graph, which it then compares from the same copy (no ranged GET of its own).
    assert _data_gets(proxy, s3) == [None, None]


def test_an_object_replaced_under_a_download_begun_ahead_is_never_restored(bucket, proxy, s3, downloader) -> None:
    url = tp.Checkpoint(model=_model(7.0)).write(f"{bucket}/run/ckpt-1")
    restored = _model(0.0)
    ckpt = tp.Checkpoint(model=restored)
    ckpt.read(url)
    restored.big.assign(np.zeros(4_000_000, np.float32))
    data = f"{url[5:]}.data-00000-of-00001"
    replaced: list[str] = []

    def fault(method: str, path: str, query: str) -> None:
        if method == "GET" and ".data-" in path and not replaced:
            replaced.append(path)  # before the download's GET, the object's first request (no HEAD)
            s3.pipe_file(data, bytes(s3.info(data)["size"]))

    proxy.fault = fault
    # The GET's answer names the version read: all of it is the replacement, whose bytes fail
    # the index's checksums (were a HEAD to name the first version, the message would say replaced).
    with pytest.raises(tp.errors.DataLossError, match="deleted or replaced while being read|the data file is damaged"):
        ckpt.read(url)
    assert replaced and float(restored.big.numpy()[0]) == 0.0  # all or nothing: no value taken


def test_a_download_begun_ahead_frees_its_copy_when_the_reader_closed_first(bucket, s3, downloader) -> None:
    url = tp.Checkpoint(model=_model(1.0)).write(f"{bucket}/run/ckpt-1")
    before = _spool_copies()
    mirror = ranged.RangedObject(f"{url}.data-00000-of-00001", "data shard")
    mirror.prefetch()
    mirror.close()
    for thread in threading.enumerate():
        if thread.name == "trackpoint-prefetch":
            thread.join(timeout=60)
    assert _spool_copies() == before and mirror.fd == -1 and not mirror.whole


def _spool_copies() -> set[str]:
    """The local copies of objects this process holds open (unlinked temporary files)."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (another thread's descriptor)
            continue
        if "trackpoint-spool-" in target:
            held.add(target)
    return held


def _requests_for(proxy, suffix: str) -> list[str]:
    return [method for method, path, _ in proxy.requests if path.endswith(suffix)]


def test_the_index_and_the_state_object_are_read_by_one_request_each(bucket, proxy, s3) -> None:
    """On S3 a GET's own answer gives the object's size and ETag: no HEAD before it, whether a
    prefix is restored, a tensor loaded, or a directory's state object read for its latest."""
    manager = tp.CheckpointManager(tp.Checkpoint(model=_model(6.0, small=range(20))), f"{bucket}/run", max_to_keep=2)
    url = manager.save()
    restored = _model(0.0, small=range(20))
    proxy.requests.clear()
    tp.Checkpoint(model=restored).read(url).assert_existing_objects_matched().expect_partial()
    assert _requests_for(proxy, ".index") == ["GET"]
    assert float(restored.small["t0019"].numpy()[0]) == 6.0 + 19
    proxy.requests.clear()
    np.testing.assert_array_equal(tp.load_variable(url, _key("small/t0003")), np.full(256, 9.0, np.float32))
    assert _requests_for(proxy, ".index") == ["GET"]
    proxy.requests.clear()
    assert tp.latest_checkpoint(f"{bucket}/run") == url
    assert _requests_for(proxy, "/run/checkpoint") == ["GET"]


def test_an_object_over_the_limit_is_refused_by_its_answer_before_its_body_is_read(bucket, s3) -> None:
    from trackpoint._storage import fsspec_io

    s3.pipe_file(f"{bucket[5:]}/big", bytes(1 << 20))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"big: checkpoint index of 1048576 bytes is larger"):
        fsspec_io.read_object(f"{bucket}/big", "checkpoint index", 1000)
    data, stat = fsspec_io.read_object(f"{bucket}/big", "checkpoint index", 1 << 20)
    assert data == bytes(1 << 20) and fsspec_io.identity(stat) == fsspec_io.identity(
        fsspec_io.stat_object(f"{bucket}/big")
    )


def test_ranged_reads_have_at_most_in_flight_requests_under_way(bucket, proxy, s3) -> None:
    """Every third of 42 tensors of 1.5 MiB: 14 ranges too far apart to merge, fetched several
    at a time but never more than ranged.IN_FLIGHT at once (each answer held back 50 ms so that
    they overlap)."""
    import time

    size = 196_608  # float64: 1.5 MiB, more than ranged.MAX_GAP between the tensors read
    m = tp.Module()
    m.v = [tp.Variable(np.full(size, float(i))) for i in range(42)]
    url = tp.Checkpoint(model=m).write(f"{bucket}/run/ckpt-1")
    partial = tp.Module()
    partial.v = {str(i): tp.Variable(np.zeros(size)) for i in range(0, 42, 3)}  # dict keys: the list's edges
    ckpt = tp.Checkpoint(model=partial)

    def slow(method: str, path: str, query: str) -> None:
        if method == "GET" and ".data-" in path:
            time.sleep(0.05)

    proxy.fault = slow
    proxy.max_in_flight = 0
    ckpt.read(url).expect_partial()
    proxy.fault = None
    assert [float(v.numpy()[0]) for v in partial.v.values()] == [float(i) for i in range(0, 42, 3)]
    assert len([h for h in _data_gets(proxy, s3) if h is not None]) >= 14
    assert 2 <= proxy.max_in_flight <= ranged.IN_FLIGHT, proxy.max_in_flight


def test_a_first_restore_asks_each_data_objects_version_once(bucket, proxy, s3) -> None:
    """The object graph's range, then the whole object: the GET's own answer says the copy is
    the version first read (S3), so no second HEAD before it replaces the range held."""
    url = tp.Checkpoint(model=_model(3.0, small=range(50))).write(f"{bucket}/run/ckpt-1")
    proxy.requests.clear()
    tp.Checkpoint(model=_model(0.0, small=range(50))).read(url).assert_consumed()
    assert _requests_for(proxy, ".data-00000-of-00001") == ["HEAD", "GET", "GET"]


def test_a_whole_download_of_another_version_is_refused(bucket, proxy, s3) -> None:
    """The object is replaced by bytes of the same size between its HEAD and its whole GET: the
    GET's answer names another version, and nothing is restored from it."""
    url = tp.Checkpoint(model=_model(3.0, small=range(50))).write(f"{bucket}/run/ckpt-1")
    data = f"{url[5:]}.data-00000-of-00001"
    size = s3.info(data)["size"]
    replaced: list[str] = []

    def replace(method: str, path: str, query: str) -> None:
        if method == "GET" and path.endswith(".data-00000-of-00001") and not replaced:
            header = [h for p, h in proxy.gets if p == path][-1]
            if header in (None, f"bytes=0-{size - 1}"):  # the whole object, after the graph's range
                replaced.append(path)
                s3.pipe_file(data, bytes(size))  # straight to the server, not through the proxy

    proxy.fault = replace
    restored = _model(0.0, small=range(50))
    with pytest.raises(tp.errors.DataLossError, match="changed while it was read|replaced while being read"):
        tp.Checkpoint(model=restored).read(url)
    proxy.fault = None
    assert replaced
    assert float(restored.big.numpy()[0]) == 0.0  # all or nothing: no value taken


def test_a_repeated_restore_asks_for_each_data_object_by_one_get_and_no_head(bucket, proxy, s3) -> None:
    """The download begun ahead is the data object's first request: its answer gives the size
    and ETag a HEAD would, so a repeated restore makes one GET of the index and one of the data."""
    url = tp.Checkpoint(model=_model(4.0, small=range(50))).write(f"{bucket}/run/ckpt-1")
    restored = _model(0.0, small=range(50))
    ckpt = tp.Checkpoint(model=restored)
    ckpt.read(url).assert_consumed()
    restored.big.assign(np.zeros(4_000_000, np.float32))
    proxy.requests.clear()
    ckpt.read(url).assert_consumed()
    assert float(restored.big.numpy()[-1]) == 4.0
    assert _requests_for(proxy, ".data-00000-of-00001") == ["GET"]
    assert _requests_for(proxy, ".index") == ["GET"]


def test_a_read_takes_its_bytes_while_the_rest_still_downloads(bucket, proxy, s3) -> None:
    """A whole download streams into the local copy: a read of the first bytes returns once they
    have arrived, long before the last (the proxy sends 1 MiB every 0.2 s: 16 MiB in over 3 s)."""
    import time

    url = tp.Checkpoint(model=_model(2.0, small=range(20))).write(f"{bucket}/run/ckpt-1")
    proxy.trickle = (1 << 20, 0.2)
    proxy.requests.clear()
    mirror = ranged.RangedObject.opened(f"{url}.data-00000-of-00001", "data shard", 64 << 20)
    try:
        start = time.monotonic()
        mirror.ensure([(0, 4096)])
        first = time.monotonic() - start
        assert not mirror.whole and first < 2.0, first  # the big tensor's first bytes, ahead of the rest
        assert np.all(np.frombuffer(os.pread(mirror.fd, 4096, 0), np.float32) == 2.0)
        mirror.ensure(None)  # returns once the last byte is in
        assert time.monotonic() - start > 2.5
        assert np.all(np.frombuffer(os.pread(mirror.fd, 4096, 16_000_000 - 4096), np.float32) == 2.0)
    finally:
        mirror.close()
        proxy.trickle = None
    assert [m for m, p, _ in proxy.requests if p.endswith(".data-00000-of-00001")] == ["GET"]


def test_a_restore_of_a_trickling_store_assigns_every_value(bucket, proxy, s3) -> None:
    """A repeated restore whose download arrives slowly, piece by piece, reads each value as its
    bytes arrive and restores them all, checksums verified."""
    url = tp.Checkpoint(model=_model(8.0)).write(f"{bucket}/run/ckpt-1")
    restored = _model(0.0)
    ckpt = tp.Checkpoint(model=restored)
    ckpt.read(url).assert_consumed()
    restored.big.assign(np.zeros(4_000_000, np.float32))
    restored.small["t1999"].assign(np.zeros(256, np.float32))
    proxy.trickle = (256 << 10, 0.01)
    try:
        ckpt.read(url).assert_consumed()
    finally:
        proxy.trickle = None
    assert float(restored.big.numpy()[0]) == 8.0 and float(restored.small["t1999"].numpy()[0]) == 8.0 + 1999
    assert _data_gets(proxy, s3)[-1:] == [None]
