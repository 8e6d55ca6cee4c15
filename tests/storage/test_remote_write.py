"""Saving TF checkpoints to an object store (moto's S3 server on 127.0.0.1): data under final names,
the index last and only if absent, nothing overwritten."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage.temps import TEMP_MARKER

pytestmark = pytest.mark.slow  # each test uploads a 16 MB checkpoint to the S3 server: about a second each


def _model(seed: int = 0) -> tp.Module:
    rng = np.random.default_rng(seed)
    m = tp.Module()
    m.w = tp.Variable(rng.standard_normal((3, 4)).astype(np.float32))
    m.big = tp.Variable(rng.standard_normal(2_000_000))  # 16 MB: one PUT (s3fs goes multipart from 100 MiB)
    m.step = tp.Variable(7, dtype="int64")
    return m


def _objects(s3, url_prefix: str) -> dict[str, bytes]:
    directory, base = url_prefix[5:].rsplit("/", 1)
    s3.invalidate_cache()
    return {
        path.rsplit("/", 1)[1]: s3.cat_file(path)
        for path in s3.ls(directory)
        if path.rsplit("/", 1)[1].startswith(base + ".")
    }


@pytest.fixture(autouse=True)
def _own_stage(tmp_path, monkeypatch) -> None:
    """Each test stages local copies (in ``tempfile.gettempdir()``) in a directory of its own, so
    that :func:`_stage_leftovers` sees no other test's (another pytest-xdist worker's) files."""
    (tmp_path / "stage").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "stage"))


def _stage_leftovers() -> list[str]:
    return [name for name in os.listdir(tempfile.gettempdir()) if TEMP_MARKER in name and name.startswith("ckpt-")]


def test_a_write_to_s3_stores_the_bytes_a_local_write_stores(tmp_path, bucket, s3) -> None:
    model = _model()
    before = _stage_leftovers()
    url = tp.Checkpoint(model=model).write(f"{bucket}/run/ckpt-1")
    assert url == f"{bucket}/run/ckpt-1"
    tp.Checkpoint(model=model).write(str(tmp_path / "ckpt-1"))
    objects = _objects(s3, url)
    assert sorted(objects) == ["ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    for name, data in objects.items():
        with open(tmp_path / name, "rb") as f:
            assert f.read() == data, name
    assert _stage_leftovers() == before  # the local staging files are gone
    other = _model(1)
    tp.Checkpoint(model=other).read(url).assert_consumed()
    np.testing.assert_array_equal(other.big.numpy(), model.big.numpy())


def test_save_tensors_to_s3_round_trips(bucket) -> None:
    tensors = {"a": np.arange(5), "s": np.array([b"x", b"yz"], dtype=object)}
    url = tp.save_tensors(f"{bucket}/plain", tensors)
    np.testing.assert_array_equal(tp.load_variable(url, "a"), tensors["a"])
    assert list(tp.load_variable(url, "s")) == [b"x", b"yz"]


def test_a_second_write_to_a_committed_prefix_is_refused_and_changes_nothing(bucket, s3) -> None:
    url = tp.Checkpoint(model=_model()).write(f"{bucket}/run/ckpt-1")
    objects = _objects(s3, url)
    with pytest.raises(tp.errors.WriteError, match=r"ckpt-1\.index exists.*new prefix"):
        tp.Checkpoint(model=_model(1)).write(url)
    assert _objects(s3, url) == objects


def test_a_writer_that_finds_a_data_object_in_place_commits_nothing(bucket, s3) -> None:
    """Another writer's data object under the same name (a live or zombie writer of the prefix):
    this write uploads nothing over it, commits no index, and leaves no object of its own."""
    url = f"{bucket}/run/ckpt-1"
    s3.pipe_file(f"{url[5:]}.data-00000-of-00001", b"another writer's bytes")
    with pytest.raises(tp.errors.WriteError, match="another writer"):
        tp.Checkpoint(model=_model()).write(url)
    assert _objects(s3, url) == {"ckpt-1.data-00000-of-00001": b"another writer's bytes"}
    with pytest.raises(tp.errors.NotFoundError):
        tp.load_checkpoint(url)


def test_a_checkpoint_committed_by_another_writer_meanwhile_wins(tmp_path, bucket, s3, monkeypatch) -> None:
    """Another writer commits its whole checkpoint between this one's start and its uploads: this
    one uploads nothing over it and raises, and the other's checkpoint restores exactly."""
    from trackpoint._storage import commit

    url = f"{bucket}/run/ckpt-1"
    winner = _model(5)
    local = tp.Checkpoint(model=winner).write(str(tmp_path / "ckpt-1"))
    real_commit = commit.commit

    def racing(data_files, index_local, index_url, **kwargs):  # the other writer, just before this one's uploads
        for suffix in (".data-00000-of-00001", ".index"):
            s3.put_file(local + suffix, url[5:] + suffix)
        return real_commit(data_files, index_local, index_url, **kwargs)

    monkeypatch.setattr(commit, "commit", racing)
    with pytest.raises(tp.errors.WriteError, match="another writer"):
        tp.Checkpoint(model=_model()).write(url)
    monkeypatch.undo()
    assert _objects(s3, url) == {
        name: (tmp_path / name).read_bytes() for name in ("ckpt-1.data-00000-of-00001", "ckpt-1.index")
    }
    restored = _model(9)
    tp.Checkpoint(model=restored).read(url).assert_consumed()
    np.testing.assert_array_equal(restored.big.numpy(), winner.big.numpy())


def test_data_objects_put_ahead_of_a_failed_commit_are_deleted(bucket, s3, monkeypatch) -> None:
    """The data objects go up while the index is built, before the commit: a commit that fails
    (here the index's upload) deletes them again, and the staged copies too."""
    from trackpoint._storage import commit

    url = f"{bucket}/run/ckpt-1"
    before = _stage_leftovers()
    seen: list[dict[str, bytes]] = []

    def failing(data_files, index_local, index_url, **kwargs):
        assert not data_files and len(kwargs["uploaded"]) == 1  # put already, not by the commit
        seen.append(_objects(s3, url))
        raise tp.errors.WriteError("the index upload failed (simulated)", path=index_url)

    monkeypatch.setattr(commit, "commit", failing)
    with pytest.raises(tp.errors.WriteError, match="simulated"):
        tp.Checkpoint(model=_model()).write(url)
    assert list(seen[0]) == ["ckpt-1.data-00000-of-00001"]
    s3.invalidate_cache()
    assert s3.find(f"{bucket[5:]}/run") == []  # nothing left under the prefix's directory
    assert _stage_leftovers() == before


def test_an_async_write_to_s3_commits_on_the_writer_thread(bucket) -> None:
    model = _model()
    expected = model.big.numpy().copy()
    ckpt = tp.Checkpoint(model=model)
    url = ckpt.write(f"{bucket}/run/ckpt-a", tp.CheckpointOptions(enable_async=True))
    model.big.assign(np.zeros_like(expected))  # after the return: not in the checkpoint
    ckpt.sync()
    np.testing.assert_array_equal(tp.load_variable(url, "model/big/.ATTRIBUTES/VARIABLE_VALUE"), expected)


def test_the_local_copies_staged_for_an_upload_are_not_fsynced(tmp_path, bucket, s3, monkeypatch) -> None:
    """A staged copy is read back by the upload and never renamed into place: fsyncing it would
    make nothing safer (a crash before the commit commits nothing). A local save still fsyncs
    its data file and its index."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    model = _model()
    url = tp.Checkpoint(model=model).write(f"{bucket}/run/ckpt")
    assert not [name for name in synced if TEMP_MARKER in name], synced
    assert tp.load_variable(url, "model/step/.ATTRIBUTES/VARIABLE_VALUE") == 7
    tp.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    staged = [os.path.basename(name) for name in synced if TEMP_MARKER in name]
    assert any(name.startswith("ckpt.index") for name in staged) and any(".data-" in name for name in staged), synced


def test_a_failed_commit_leaves_an_object_another_writer_put_over_its_own(tmp_path, bucket, s3, monkeypatch) -> None:
    """The commit path that uploads data objects itself (safetensors, and bundles of other
    ranks): when the index loses, it deletes the data objects it put, but not one that
    another writer has overwritten since (here unconditionally, between the two uploads)."""
    from trackpoint._storage import commit

    data, index = tmp_path / "data", tmp_path / "index"
    data.write_bytes(b"this writer's data")
    index.write_bytes(b"this writer's index")
    url = f"{bucket}/run/ckpt-1"
    s3.pipe_file(f"{url[5:]}.index", b"the other writer's index")  # it committed first
    real_require = commit._require

    def overwritten(urls, what, when):
        if when == "before":
            s3.pipe_file(f"{url[5:]}.data-00000-of-00001", b"the other writer's data")
        return real_require(urls, what, when)

    monkeypatch.setattr(commit, "_require", overwritten)
    with pytest.raises(tp.errors.WriteError, match="another writer"):
        commit.commit([(str(data), f"{url}.data-00000-of-00001")], str(index), f"{url}.index")
    assert _objects(s3, url) == {
        "ckpt-1.data-00000-of-00001": b"the other writer's data",
        "ckpt-1.index": b"the other writer's index",
    }
    # Had nobody put over it, its own data object goes again.
    s3.rm_file(f"{url[5:]}.data-00000-of-00001")
    monkeypatch.setattr(commit, "_require", real_require)
    with pytest.raises(tp.errors.WriteError, match="another writer"):
        commit.commit([(str(data), f"{url}.data-00000-of-00001")], str(index), f"{url}.index")
    assert _objects(s3, url) == {"ckpt-1.index": b"the other writer's index"}
