"""Injected write failures: the error surfaces, the previous checkpoint and state file survive."""

from __future__ import annotations

import errno
import os
import time

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format import bundle_writer
from trackpoint._storage import temps


def _setup(tmp_path):
    model = tp.Module()
    model.w = tp.Variable(np.arange(1000, dtype=np.float32))
    model.b = tp.Variable([1.0, 2.0])
    ckpt = tp.Checkpoint(model=model)
    first = ckpt.save(str(tmp_path / "ckpt"))
    return ckpt, model, first, (tmp_path / "checkpoint").read_bytes()


def _assert_survived(tmp_path, first: str, state: bytes) -> None:
    assert (tmp_path / "checkpoint").read_bytes() == state
    assert tp.latest_checkpoint(str(tmp_path)) == first
    assert tp.verify_checkpoint(first) == []
    assert not [n for n in os.listdir(tmp_path) if ".tp-tmp-" in n]
    assert not [n for n in os.listdir(tmp_path) if n.startswith("ckpt-2")]
    fresh = tp.Module()
    fresh.w = tp.Variable(np.zeros(1000, np.float32))
    fresh.b = tp.Variable([0.0, 0.0])
    tp.Checkpoint(model=fresh).restore(first).assert_consumed()
    assert fresh.w.numpy()[999] == 999


class _FailingFile:
    """A data file whose ``write`` raises ``error`` once ``after`` writes went through."""

    def __init__(self, file, calls: list[int], after: int, error: int) -> None:
        self._file, self._calls, self._after, self._error = file, calls, after, error

    def write(self, buffer) -> int:
        self._calls[0] += 1
        if self._calls[0] > self._after:
            raise OSError(self._error, os.strerror(self._error))
        return self._file.write(buffer)

    def __getattr__(self, name: str):
        return getattr(self._file, name)


def _failing(after: int, error: int):
    """A ShardWriter.__init__ whose data file fails after ``after`` writes (counted over all shards)."""
    calls = [0]
    real = bundle_writer.ShardWriter.__init__

    def init(self, path, shard_id):
        real(self, path, shard_id)
        self._file = _FailingFile(self._file, calls, after, error)

    return init


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EACCES, errno.EROFS])
@pytest.mark.parametrize("after", [0, 2])
def test_sync_save_failing_mid_write(tmp_path, monkeypatch, error: int, after: int) -> None:
    ckpt, model, first, state = _setup(tmp_path)
    model.w.assign_add(np.ones(1000, np.float32))
    monkeypatch.setattr(bundle_writer.ShardWriter, "__init__", _failing(after, error))
    with pytest.raises(
        tp.errors.WriteError, match=r"could not write checkpoint .*ckpt-2.*earlier checkpoints are untouched"
    ) as info:
        ckpt.save(str(tmp_path / "ckpt"))
    assert info.value.__cause__.errno == error and isinstance(info.value, OSError)
    _assert_survived(tmp_path, first, state)


def test_failing_fsync_and_rename(tmp_path, monkeypatch) -> None:
    ckpt, _, first, state = _setup(tmp_path)

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(tp.errors.WriteError):
        ckpt.save(str(tmp_path / "ckpt"))
    monkeypatch.undo()
    _assert_survived(tmp_path, first, state)

    real_replace = os.replace

    def refuse_index(src: str, dst: str) -> None:
        if dst.endswith(".index"):
            raise PermissionError(errno.EACCES, "Permission denied", dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", refuse_index)
    with pytest.raises(tp.errors.WriteError, match="Permission denied"):
        ckpt.save(str(tmp_path / "ckpt"))
    monkeypatch.undo()
    # the data file of the failed save may have been renamed, but without its index it is invisible
    assert tp.latest_checkpoint(str(tmp_path)) == first and (tmp_path / "checkpoint").read_bytes() == state


def test_async_failure_surfaces_on_sync_and_next_save(tmp_path, monkeypatch) -> None:
    ckpt, _, first, state = _setup(tmp_path)
    monkeypatch.setattr(bundle_writer.ShardWriter, "__init__", _failing(1, errno.ENOSPC))
    options = tp.CheckpointOptions(enable_async=True)
    ckpt.save(str(tmp_path / "ckpt"), options)
    with pytest.raises(tp.errors.WriteError, match="No space left"):
        ckpt.sync()
    _assert_survived(tmp_path, first, state)
    ckpt.save(str(tmp_path / "ckpt"), options)
    with pytest.raises(tp.errors.WriteError):
        ckpt.save(str(tmp_path / "ckpt"), options)  # the next save reports the previous failure
    ckpt.sync()


def test_manager_failure_keeps_its_list(tmp_path, monkeypatch) -> None:
    model = tp.Module()
    model.w = tp.Variable([1.0])
    manager = tp.CheckpointManager(tp.Checkpoint(model=model), str(tmp_path), max_to_keep=2)
    first = manager.save()
    monkeypatch.setattr(bundle_writer.ShardWriter, "__init__", _failing(0, errno.ENOSPC))
    with pytest.raises(tp.errors.WriteError):
        manager.save()
    monkeypatch.undo()
    assert manager.checkpoints == [first] and manager.latest_checkpoint == first
    assert tp.latest_checkpoint(str(tmp_path)) == first


def test_unwritable_location(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(tp.errors.WriteError, match="File exists"):
        tp.save_tensors(str(blocker / "ckpt"), {"x": np.zeros(1)})


def test_stale_temporaries_of_dead_writers_are_removed_by_the_next_save(tmp_path) -> None:
    here = temps.node_id()
    dead = tmp_path / f"ckpt-7.index.tp-tmp-{here}-999999999-abcd"
    dead.write_bytes(b"half")
    ours = tmp_path / f"other.index.tp-tmp-{here}-{os.getpid()}-abcd"
    ours.write_bytes(b"in flight")
    assert tp.latest_checkpoint(str(tmp_path)) is None  # readers ignore them
    tp.save_tensors(str(tmp_path / "new"), {"x": np.zeros(1)})
    assert not dead.exists() and ours.exists()  # a live writer's files are left alone


def test_temporaries_of_other_namespaces_are_removed_only_when_old(tmp_path) -> None:
    # A PID in another container's (or host's) namespace says nothing here: only age does.
    other = "0" * 8 if temps.node_id() != "0" * 8 else "1" * 8
    fresh = tmp_path / f"a.index.tp-tmp-{other}-999999999-abcd"
    old = tmp_path / f"b.index.tp-tmp-{other}-999999999-abcd"
    legacy = tmp_path / "c.index.tp-tmp-999999999-abcd"  # no namespace recorded
    for path in (fresh, old, legacy):
        path.write_bytes(b"x")
    past = time.time() - temps.FOREIGN_TEMP_AGE - 60
    os.utime(old, (past, past))
    tp.save_tensors(str(tmp_path / "new"), {"x": np.zeros(1)})
    assert fresh.exists() and legacy.exists() and not old.exists()


def test_state_file_naming_a_deleted_checkpoint_says_what_to_do(tmp_path) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(1.0))
    first = ckpt.save(str(tmp_path / "ckpt"))
    second = ckpt.save(str(tmp_path / "ckpt"))
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n'
    )
    os.unlink(second + ".index")
    for action in (
        lambda: tp.Checkpoint(v=tp.Variable(0.0)).restore(str(tmp_path)),
        lambda: tp.load_checkpoint(str(tmp_path)),
        lambda: tp.CheckpointView(str(tmp_path)),
    ):
        with pytest.raises(tp.errors.NotFoundError, match=r"names .*ckpt-2, but .*ckpt-2.index is missing.*ckpt-1"):
            action()
    assert first.endswith("ckpt-1")
