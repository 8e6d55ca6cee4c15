"""Incremental saves at s3:// URLs (moto's server, requests counted by the proxy): the data objects whose
tensors did not change are copied on the server, never uploaded, never over another object, and only
while they are the bytes the previous save wrote; every checkpoint stays whole and TF reads it."""

from __future__ import annotations

import collections
import hashlib
import uuid
from pathlib import Path

import numpy as np
import pytest

import trackpoint as tp
from tests.storage.proxy import Proxy

INCREMENTAL = tp.CheckpointOptions(incremental=True)
ROWS = 1 << 20  # float32s: 4 MiB, a data object of its own
BIG = ROWS * 4
SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _model(seed: int = 0) -> dict[str, tp.Variable]:
    rng = np.random.default_rng(seed)
    big = {f"layer{i}": tp.Variable(rng.standard_normal(ROWS, np.float32)) for i in range(4)}
    small = {f"bias{i}": tp.Variable(rng.standard_normal(8)) for i in range(3)}
    return {**big, "step": tp.Variable(np.int64(0)), **small}


def _object_of(prefix: str, name: str) -> str:
    """The URL of the data object that holds variable ``name``."""
    with tp.load_checkpoint(prefix) as reader:
        shard, count = reader._entries()[name + SUFFIX].shard_id, reader._bundle.num_shards
    return f"{prefix}.data-{shard:05d}-of-{count:05d}"


def _assert_holds(prefix: str, variables: dict[str, tp.Variable]) -> None:
    assert tp.verify_checkpoint(prefix) == []
    with tp.load_checkpoint(prefix) as reader:
        for name, v in variables.items():
            assert np.array_equal(reader.get_tensor(name + SUFFIX), v.numpy()), (prefix, name)


def _sent(proxy: Proxy) -> collections.Counter[str]:
    """Bytes of request bodies by object path, since the proxy's log was last cleared."""
    totals: collections.Counter[str] = collections.Counter()
    for _, path, length in proxy.sent:
        totals[path] += length
    return totals


def _path(url: str) -> str:
    return "/" + url.removeprefix("s3://")


def _objects(s3, prefix: str) -> list[str]:
    s3.invalidate_cache()
    directory, _, name = prefix.removeprefix("s3://").rpartition("/")
    return sorted(p.rsplit("/", 1)[1] for p in s3.ls(directory) if p.rsplit("/", 1)[1].startswith(name + "."))


def test_unchanged_objects_are_copied_on_the_server_and_changes_uploaded(bucket, proxy) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    first = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    whole = sum(_sent(proxy).values())
    assert whole > 4 * BIG
    variables["layer1"].assign(variables["layer1"].numpy() * 2)  # changed whole
    changed = variables["layer2"].numpy().copy()
    changed[12345] += 1.0  # one element of a large tensor
    variables["layer2"].assign(changed)
    variables["step"].assign(np.int64(1))
    proxy.sent.clear()
    proxy.requests.clear()
    second = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    _assert_holds(second, variables)
    sent = _sent(proxy)
    for frozen in ("layer0", "layer3"):
        url = _object_of(second, frozen)
        assert sent[_path(url)] < 1024, (frozen, sent[_path(url)])  # the parts list of the completion, no data
        copies = [r for r in proxy.requests if r[1] == _path(url) and "partNumber" in r[2]]
        assert len(copies) == 1 and copies[0][0] == "PUT"  # one UploadPartCopy: the store copied it
    for name in ("layer1", "layer2"):
        assert sent[_path(_object_of(second, name))] >= BIG, name
    # Two of the four large tensors, the small ones, the index and the state object went up.
    assert 2 * BIG <= sum(sent.values()) < 2 * BIG + 64 * 1024
    # The first checkpoint is untouched and independent of the second.
    _assert_holds(first, {k: v for k, v in _model().items() if k not in ("layer1", "layer2")})


def test_a_third_save_copies_the_copies_and_the_small_frozen_tensors_together(bucket, proxy) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    variables["step"].assign(np.int64(1))
    ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)  # the biases now share an object of their own
    variables["step"].assign(np.int64(2))
    proxy.sent.clear()
    third = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    _assert_holds(third, variables)
    sent = _sent(proxy)
    for name in ("layer0", "layer1", "layer2", "layer3", "bias0"):
        assert sent[_path(_object_of(third, name))] < 1024, name
    assert _object_of(third, "bias0") == _object_of(third, "bias2") != _object_of(third, "step")
    assert sum(sent.values()) < 64 * 1024  # the step, the index and the state object


def test_a_manager_keeping_one_checkpoint_keeps_every_one_it_keeps_whole(bucket, s3) -> None:
    variables = _model()
    manager = tp.CheckpointManager(tp.Checkpoint(**variables), f"{bucket}/run", max_to_keep=1)
    for step in range(1, 5):
        variables["step"].assign(np.int64(step))
        if step % 2:
            variables[f"layer{step}"].assign(variables[f"layer{step}"].numpy() + 1)
        path = manager.save(options=INCREMENTAL)
        assert manager.checkpoints == [path]
        _assert_holds(path, variables)  # its older checkpoint, copied from, is gone
        assert [n for n in _objects(s3, f"{bucket}/run/ckpt-{step - 1}")] == []
    restored = _model(seed=9)
    tp.Checkpoint(**restored).restore(f"{bucket}/run").assert_consumed()
    for name, v in variables.items():
        assert np.array_equal(restored[name].numpy(), v.numpy()), name


def test_an_object_replaced_or_deleted_behind_its_back_is_uploaded_not_copied(bucket, s3, proxy) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    first = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    replaced, deleted = _object_of(first, "layer0"), _object_of(first, "layer3")
    s3.pipe_file(replaced.removeprefix("s3://"), np.zeros(ROWS, np.float32).tobytes())  # same size, other bytes
    s3.rm_file(deleted.removeprefix("s3://"))
    proxy.sent.clear()
    second = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    _assert_holds(second, variables)
    sent = _sent(proxy)
    for name in ("layer0", "layer3"):
        assert sent[_path(_object_of(second, name))] >= BIG, name  # written from the variable
    for name in ("layer1", "layer2"):
        assert sent[_path(_object_of(second, name))] < 1024, name
    with tp.load_checkpoint(second) as reader:
        count = reader._bundle.num_shards
    assert _objects(s3, second) == sorted(
        [f"ckpt-2.data-{i:05d}-of-{count:05d}" for i in range(count)] + ["ckpt-2.index"]
    )


def test_a_copy_never_overwrites_an_object_another_writer_put_at_its_name(bucket, s3, proxy) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    theirs = b"another writer's object"
    raced: list[str] = []

    def fault(method: str, path: str, query: str) -> None:
        # Just before this save completes its first copy, another writer puts an object there.
        if method == "POST" and "uploadId=" in query and "/ckpt-2.data-" in path and not raced:
            raced.append(path)
            s3.pipe_file(path.lstrip("/"), theirs)

    proxy.fault = fault
    try:
        with pytest.raises(tp.errors.WriteError, match="exists already"):
            ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    finally:
        proxy.fault = None
    assert raced
    s3.invalidate_cache()
    assert s3.cat_file(raced[0].lstrip("/")) == theirs
    assert _objects(s3, f"{bucket}/run/ckpt-2") == [raced[0].rsplit("/", 1)[1]]  # the other copies withdrawn
    assert s3.list_multipart_uploads(bucket.removeprefix("s3://")) == []
    assert tp.latest_checkpoint(f"{bucket}/run") == f"{bucket}/run/ckpt-1"
    variables["step"].assign(np.int64(7))
    _assert_holds(ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL), variables)  # ckpt-3, whole


def test_a_copy_that_fails_withdraws_the_others_and_commits_nothing(bucket, s3, proxy) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    refused: list[str] = []

    def fault(method: str, path: str, query: str) -> int | None:
        if method == "PUT" and "partNumber=" in query and "/ckpt-2.data-00001-" in path:
            refused.append(path)
            return 403
        return None

    proxy.fault = fault
    try:
        with pytest.raises(tp.errors.WriteError):
            ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    finally:
        proxy.fault = None
    assert refused
    assert _objects(s3, f"{bucket}/run/ckpt-2") == []  # the copies made were deleted again
    assert s3.list_multipart_uploads(bucket.removeprefix("s3://")) == []  # and their uploads aborted
    assert tp.latest_checkpoint(f"{bucket}/run") == f"{bucket}/run/ckpt-1"


@pytest.mark.slow  # 101 MiB through moto, three times
def test_an_object_uploaded_in_parts_is_copied_in_the_same_parts(bucket, s3, proxy) -> None:
    # s3fs uploads 100 MiB and more in 50 MiB parts; the copy cuts the same parts, so its ETag is
    # the source's, and the copy after it again.
    big = tp.Variable(np.random.default_rng(1).standard_normal((101 << 20) // 4, np.float32))
    step = tp.Variable(np.int64(0))
    ckpt = tp.Checkpoint(big=big, step=step)
    first = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    source = s3.info(_object_of(first, "big").removeprefix("s3://"))["ETag"]
    assert source.endswith('-3"')
    for number in (1, 2):
        step.assign(np.int64(number))
        proxy.sent.clear()
        later = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
        url = _object_of(later, "big")
        assert _sent(proxy)[_path(url)] < 1024
        assert s3.info(url.removeprefix("s3://"))["ETag"] == source
    _assert_holds(later, {"big": big, "step": step})


def test_an_asynchronous_incremental_save_copies_too(bucket, proxy) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    options = tp.CheckpointOptions(incremental=True, enable_async=True)
    ckpt.save(f"{bucket}/run/ckpt", options=options)
    variables["step"].assign(np.int64(1))
    ckpt.sync()
    proxy.sent.clear()
    second = ckpt.save(f"{bucket}/run/ckpt", options=options)
    ckpt.sync()
    sent = _sent(proxy)
    _assert_holds(second, variables)
    assert all(sent[_path(_object_of(second, f"layer{i}"))] < 1024 for i in range(4)), sent


def test_a_save_to_another_bucket_uploads_what_it_would_copy(bucket, s3, proxy) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    other = f"{bucket}-b"
    s3.mkdir(other.removeprefix("s3://"))
    proxy.sent.clear()
    second = ckpt.save(f"{other}/run/ckpt", options=INCREMENTAL)
    _assert_holds(second, variables)
    assert sum(_sent(proxy).values()) >= 4 * BIG  # copied only within a bucket


def test_a_store_that_cannot_copy_writes_every_incremental_save_whole() -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    directory = f"memory://incremental-{uuid.uuid4().hex[:8]}"
    for step in range(3):
        variables["step"].assign(np.int64(step))
        _assert_holds(ckpt.write(f"{directory}/w{step}", INCREMENTAL), variables)


@pytest.mark.interop
def test_tensorflow_reads_an_incremental_checkpoint_copied_on_the_server(bucket, s3, tmp_path: Path) -> None:
    from tests.interop.tf_process import tf_side

    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    variables["layer1"].assign(np.ones(ROWS, np.float32))
    ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)
    third = ckpt.save(f"{bucket}/run/ckpt", options=INCREMENTAL)  # copies of copies, and of uploads
    for name in _objects(s3, third):  # TF reads no s3:// here: the objects as they are, locally
        (tmp_path / name).write_bytes(s3.cat_file(f"{bucket.removeprefix('s3://')}/run/{name}"))
    theirs = tf_side("files").load(str(tmp_path / "ckpt-3"))["tensors"]
    for name, v in variables.items():
        assert np.array_equal(theirs[name + SUFFIX], v.numpy()), name


def test_the_copy_plan_gives_the_etag_a_copy_in_those_parts_has() -> None:
    from trackpoint._storage.server_copy import plan

    data = bytes(range(256)) * 4000
    whole = hashlib.md5(data).hexdigest()
    spans, etag = plan(len(data), f'"{whole}"')
    assert spans == [(0, len(data))]
    assert etag == hashlib.md5(hashlib.md5(data).digest()).hexdigest() + "-1"
    assert plan(len(data), f'"{etag}"') == (spans, etag)  # a copy of a copy: the same again
    assert plan(len(data), f'"{whole}-2"') is None  # parts it cannot know
    assert plan(0, f'"{whole}"') is None
