"""A restore holds no file open once it returns; values kept for objects created later are
read from the files reopened for that read, and a checkpoint changed meanwhile is caught."""

from __future__ import annotations

import os
import pathlib
import threading

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EveryTensorAlone, open_files, with_slots
from trackpoint._format.bundle_reader import BundleReader


def test_restore_and_read_leave_no_checkpoint_file_open(tmp_path) -> None:
    source = with_slots()
    saved = source.save(str(tmp_path / "ckpt"))
    written = source.write(str(tmp_path / "w"), tp.CheckpointOptions(experimental_sharding_callback=EveryTensorAlone()))
    assert len(list(tmp_path.glob("w.data-*"))) > 2
    target = with_slots(0.0)
    statuses = [target.restore(saved), target.restore(str(tmp_path)), target.read(written), target.read(written)]
    assert open_files(tmp_path) == []  # the statuses are alive; the files are closed
    for status in statuses:
        status.assert_consumed()
    assert target.model.a.numpy().tolist() == [1.0, 1.0, 1.0]
    assert open_files(tmp_path) == []


def test_no_file_is_open_while_restore_on_create_is_pending_nor_after_creation(tmp_path) -> None:
    path = with_slots(5.0).save(str(tmp_path / "ckpt"))
    model = tp.Module()
    ckpt = tp.Checkpoint(model=model)
    status = ckpt.restore(path)
    assert status.report().pending["(root).model.a"] is True  # waiting for model.a to be created
    assert open_files(tmp_path) == []

    model.a = tp.Variable(np.zeros(3, np.float32))  # the value is read now
    assert model.a.numpy().tolist() == [5.0, 5.0, 5.0]
    assert open_files(tmp_path) == []

    ckpt.optimizer = tp.optimizers.Adam(0.1)  # slots wait for the optimizer's add_slot
    assert open_files(tmp_path) == []
    model.b = tp.Variable(np.zeros(2, np.float64))
    ckpt.optimizer.apply_gradients([(np.zeros(3, np.float32), model.a), (np.zeros(2), model.b)])
    assert ckpt.optimizer.get_slot(model.a, "m") is not None
    assert open_files(tmp_path) == []
    assert model.b.numpy().tolist() == [6.0, 6.0]
    assert int(ckpt.save_counter.numpy()) == 1


def _replace_with(tmp_path: pathlib.Path, prefix: str, value: float) -> None:
    """Put another checkpoint of the same layout at ``prefix``, file by file, with os.replace."""
    other = with_slots(value).write(str(tmp_path / "other" / "ckpt"))
    for suffix in (".data-00000-of-00001", ".index"):
        os.replace(other + suffix, prefix + suffix)


def test_a_checkpoint_replaced_before_a_pending_value_is_read_raises_instead_of_mixing(tmp_path) -> None:
    path = with_slots(1.0).write(str(tmp_path / "ckpt"))
    model = tp.Module()
    ckpt = tp.Checkpoint(model=model)
    ckpt.read(path).expect_partial()
    model.a = tp.Variable(np.zeros(3, np.float32))  # from the checkpoint as it was
    _replace_with(tmp_path, path, 7.0)
    with pytest.raises(tp.errors.DataLossError) as caught:
        model.b = tp.Variable(np.zeros(2, np.float64))
    message = str(caught.value)
    assert path + ".data-00000-of-00001" in message
    assert "'model/b/.ATTRIBUTES/VARIABLE_VALUE'" in message
    assert "replaced or modified" in message and "restore again" in message
    assert model.a.numpy().tolist() == [1.0, 1.0, 1.0]
    del caught
    assert open_files(tmp_path) == []
    # The remedy works: restoring again reads the checkpoint as it is now.
    ckpt.read(path).expect_partial()
    assert model.a.numpy().tolist() == [7.0, 7.0, 7.0]


def test_a_data_file_modified_in_place_is_detected_even_with_the_same_bytes(tmp_path) -> None:
    path = with_slots().write(str(tmp_path / "ckpt"))
    model = tp.Module()
    tp.Checkpoint(model=model).read(path).expect_partial()
    data = pathlib.Path(path + ".data-00000-of-00001")
    stat = data.stat()
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # touched, same inode and size
    with pytest.raises(tp.errors.DataLossError, match="replaced or modified"):
        model.a = tp.Variable(np.zeros(3, np.float32))


def test_a_checkpoint_deleted_before_a_pending_value_is_read_raises_not_found(tmp_path) -> None:
    path = with_slots().write(str(tmp_path / "ckpt"))
    model = tp.Module()
    tp.Checkpoint(model=model).read(path).expect_partial()
    for file in tmp_path.glob("ckpt.*"):
        file.unlink()
    with pytest.raises(tp.errors.NotFoundError, match=r"was deleted after its index was read.*restore again") as caught:
        model.a = tp.Variable(np.zeros(3, np.float32))
    assert "'model/a/.ATTRIBUTES/VARIABLE_VALUE'" in str(caught.value)


def test_a_shard_the_restore_never_opened_is_checked_through_the_index(tmp_path) -> None:
    # One data file per tensor: the restore itself opens only the object graph's, so the
    # pending value's file is first opened after the checkpoint was replaced.
    sharded = tp.CheckpointOptions(experimental_sharding_callback=EveryTensorAlone())
    path = with_slots(1.0).write(str(tmp_path / "ckpt"), sharded)
    model = tp.Module()
    tp.Checkpoint(model=model).read(path).expect_partial()
    # The same layout with other values, put in place by something other than trackpoint
    # (whose own overwrite would first keep the waiting values: see test_kept_values.py).
    with_slots(9.0).write(str(tmp_path / "other" / "ckpt"), sharded)
    for file in sorted((tmp_path / "other").glob("ckpt.*"), key=lambda f: f.suffix == ".index"):
        os.replace(file, path + file.name[len("ckpt") :])
    fresh = tp.Variable(np.zeros(3, np.float32))
    with pytest.raises(tp.errors.DataLossError, match="replaced or modified"):
        model.a = fresh
    assert fresh.numpy().tolist() == [0.0, 0.0, 0.0]  # not the new checkpoint's 9.0


def test_a_failed_restore_leaves_no_file_open_even_while_its_traceback_lives(tmp_path) -> None:
    path = with_slots().save(str(tmp_path / "ckpt"))
    target = with_slots()
    target.model.b = tp.Variable(np.zeros(5))  # the checkpoint's is [2]
    with pytest.raises(tp.errors.InvalidArgumentError, match="model/b") as caught:
        target.restore(path)
    assert caught.traceback  # the frames, and the restore's locals, are still referenced
    assert open_files(tmp_path) == []


def test_a_value_read_alone_for_restore_on_create_is_checked_like_a_batch(tmp_path) -> None:
    # A variable created on its own takes its one tensor without batch planning; the
    # checksum, dtype and shape checks are the same.
    source = tp.Module()
    source.ok = tp.Variable(np.arange(4, dtype=np.int64))
    source.bad = tp.Variable(np.full(8, 3.0))
    path = tp.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    with BundleReader(path) as reader:
        entry = reader.entry("model/bad/.ATTRIBUTES/VARIABLE_VALUE")
    with open(path + ".data-00000-of-00001", "r+b") as f:  # damaged before the restore
        f.seek(entry.offset)
        f.write(b"\xff")
    model = tp.Module()
    tp.Checkpoint(model=model).read(path).expect_partial()
    model.ok = tp.Variable(np.zeros(4, np.int64))
    assert model.ok.numpy().tolist() == [0, 1, 2, 3] and not model.ok.numpy().flags.writeable
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch for key 'model/bad"):
        model.bad = tp.Variable(np.zeros(8))
    late = tp.Module()
    tp.Checkpoint(model=late).read(path).expect_partial()
    with pytest.raises(tp.errors.InvalidArgumentError, match="received incompatible tensor with shape"):
        late.ok = tp.Variable(np.zeros(5, np.int64))
    assert open_files(tmp_path) == []


def test_objects_created_on_several_threads_read_their_values_while_others_close_the_files(tmp_path) -> None:
    # Each creation opens the files and closes them when the last reader is done: one
    # thread's close must never pull a descriptor from under another's read.
    threads, per_thread = 6, 40
    source = tp.Module()
    for t in range(threads):
        part = tp.Module()
        for i in range(per_thread):
            setattr(part, f"v{i}", tp.Variable(np.full(512, t * 1000 + i, np.int64)))
        setattr(source, f"part{t}", part)
    path = tp.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    model = tp.Module()
    parts = [tp.Module() for _ in range(threads)]
    for t, part in enumerate(parts):
        setattr(model, f"part{t}", part)  # bound now; their variables wait
    status = tp.Checkpoint(model=model).read(path)
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def create(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                setattr(parts[t], f"v{i}", tp.Variable(np.zeros(512, np.int64)))
        except BaseException as exc:  # noqa: BLE001 - reported below, on the test's thread
            errors.append(exc)

    workers = [threading.Thread(target=create, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    status.assert_consumed()
    for t, part in enumerate(parts):
        assert [int(getattr(part, f"v{i}").numpy()[0]) for i in range(per_thread)] == [
            t * 1000 + i for i in range(per_thread)
        ]
    assert open_files(tmp_path) == []


def test_many_pending_values_are_each_read_from_reopened_files(tmp_path) -> None:
    source = tp.Module()
    for i in range(50):
        setattr(source, f"v{i}", tp.Variable(np.full(4, i, np.int64)))
    path = tp.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    model = tp.Module()
    status = tp.Checkpoint(model=model).read(path)
    for i in range(50):
        setattr(model, f"v{i}", tp.Variable(np.zeros(4, np.int64)))
        assert open_files(tmp_path) == []
    status.assert_consumed()
    assert [int(getattr(model, f"v{i}").numpy()[0]) for i in range(50)] == list(range(50))


def test_a_missing_data_shard_is_not_mistaken_for_a_prefix_missing_its_number(tmp_path) -> None:
    path = with_slots().save(str(tmp_path / "ckpt"))
    os.remove(path + ".data-00000-of-00001")
    with pytest.raises(tp.errors.NotFoundError, match="data shard") as caught:
        with_slots().restore(path)
    assert "numbers its prefixes" not in str(caught.value)
    with pytest.raises(tp.errors.NotFoundError, match=r"checkpoints in .*: ckpt-1 .*numbers its prefixes"):
        with_slots().restore(str(tmp_path / "ckpt"))


def test_a_path_to_a_checkpoint_file_is_answered_with_the_prefixes_that_exist(tmp_path) -> None:
    source = with_slots()
    for _ in range(3):
        path = source.save(str(tmp_path / "ckpt"))
    with pytest.raises(tp.errors.NotFoundError) as caught:
        with_slots().restore(path + ".index")
    message = str(caught.value)
    assert "ckpt-1, ckpt-2, ckpt-3" in message and ".index-1" not in message
