"""A read, in the process that is still writing a checkpoint asynchronously, of that checkpoint or
of its directory waits for the write instead of finding the previous checkpoint (issue 38, item 4).

Each background write here is held open by a write callback that waits for an event, which a
timer sets a moment later: without the wait the read happens while the new checkpoint is
incomplete and unrecorded, and returns the previous one.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import trackpoint as tp

_HOLD = 0.4  # seconds each write is held open by its callback


def _held(on_writer: Callable[[str], None] | None = None) -> tp.CheckpointOptions:
    """Async options whose write callback keeps the write in flight for ``_HOLD`` seconds."""
    release = threading.Event()
    timer = threading.Timer(_HOLD, release.set)

    def callback(path: str) -> None:
        if on_writer is not None:
            on_writer(path)
        if not release.wait(30):
            raise RuntimeError("the test's timer never released the write")

    timer.start()
    return tp.CheckpointOptions(enable_async=True, experimental_write_callbacks=[callback])


def _saved_twice(directory: str) -> tuple[tp.Checkpoint, tp.CheckpointManager, tp.Variable]:
    v = tp.Variable(np.full(4, 1.0, np.float32))
    ckpt = tp.Checkpoint(v=v)
    manager = tp.CheckpointManager(ckpt, directory, max_to_keep=3)
    manager.save()
    v.assign(np.full(4, 2.0, np.float32))
    manager.save(options=_held())
    return ckpt, manager, v


def test_manager_latest_checkpoint_names_the_save_in_flight(tmp_path) -> None:
    ckpt, manager, _ = _saved_twice(str(tmp_path))
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-2")
    assert manager.checkpoints == [str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2")]
    ckpt.sync()


def test_a_directory_read_by_another_checkpoint_waits_for_the_save(tmp_path) -> None:
    ckpt, _, _ = _saved_twice(str(tmp_path))
    other = tp.Variable(np.zeros(4, np.float32))
    tp.Checkpoint(v=other).restore(str(tmp_path)).assert_consumed()
    np.testing.assert_array_equal(other.numpy(), 2.0)
    ckpt.sync()


@pytest.mark.parametrize(
    "read",
    [
        lambda d: tp.latest_checkpoint(d),
        lambda d: tp.get_checkpoint_state(d).model_checkpoint_path,
        lambda d: tp.load_variable(d, "v/.ATTRIBUTES/VARIABLE_VALUE")[0] and tp.latest_checkpoint(d),
    ],
    ids=["latest_checkpoint", "get_checkpoint_state", "load_variable"],
)
def test_module_level_reads_wait_for_the_save(tmp_path, read) -> None:
    ckpt, _, _ = _saved_twice(str(tmp_path))
    assert read(str(tmp_path)).endswith("ckpt-2")
    ckpt.sync()


def test_load_variable_of_the_directory_gets_the_new_value(tmp_path) -> None:
    ckpt, _, _ = _saved_twice(str(tmp_path))
    np.testing.assert_array_equal(tp.load_variable(str(tmp_path), "v/.ATTRIBUTES/VARIABLE_VALUE"), 2.0)
    ckpt.sync()


def test_the_prefix_itself_waits_for_its_write(tmp_path) -> None:
    v = tp.Variable(np.full(3, 5.0, np.float32))
    ckpt = tp.Checkpoint(v=v)
    prefix = ckpt.write(str(tmp_path / "one"), options=_held())
    np.testing.assert_array_equal(tp.load_variable(prefix, "v/.ATTRIBUTES/VARIABLE_VALUE"), 5.0)
    ckpt.sync()


def test_a_write_callback_reading_its_own_checkpoint_does_not_wait_for_itself(tmp_path) -> None:
    seen: list[float] = []

    def read_back(path: str) -> None:  # on the writer thread: it must not wait for its own write
        seen.append(float(tp.load_variable(path, "v/.ATTRIBUTES/VARIABLE_VALUE")[0]))

    ckpt = tp.Checkpoint(v=tp.Variable(np.full(2, 3.0, np.float32)))
    manager = tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    manager.save(options=_held(read_back))
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (ckpt.sync(), done.set()), daemon=True)
    waiter.start()
    assert done.wait(10), "the write deadlocked waiting for itself"
    assert seen == [3.0]


def test_a_failed_save_is_waited_for_and_the_read_warns_of_it(tmp_path) -> None:
    v = tp.Variable(np.full(2, 1.0, np.float32))
    ckpt = tp.Checkpoint(v=v)
    manager = tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=3)
    manager.save()
    v.assign(np.full(2, 9.0, np.float32))
    release = threading.Event()
    threading.Timer(_HOLD, release.set).start()

    def fail(path: str) -> None:
        release.wait(30)
        raise OSError("the test's callback fails")

    manager.save(options=tp.CheckpointOptions(enable_async=True, experimental_write_callbacks=[fail]))
    with pytest.warns(RuntimeWarning, match="failed"):
        latest = tp.latest_checkpoint(str(tmp_path))
    # The callback ran after the files were complete: the manager recorded the checkpoint anyway,
    # as TF does, and the read, having waited, sees it.
    assert latest is not None and latest.endswith("ckpt-2")
    with pytest.raises(OSError, match="callback fails"):
        ckpt.sync()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tp.latest_checkpoint(str(tmp_path)) == latest  # nothing in flight any more: no warning


def test_another_prefix_in_the_directory_is_read_at_once(tmp_path) -> None:
    v = tp.Variable(np.full(2, 4.0, np.float32))
    ckpt = tp.Checkpoint(v=v)
    manager = tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=3)
    first = manager.save()
    release = threading.Event()
    options = tp.CheckpointOptions(enable_async=True, experimental_write_callbacks=[lambda: release.wait(30)])
    manager.save(options=options)
    try:  # the save is held until after the read: a read that waited for it would fail here
        np.testing.assert_array_equal(tp.load_variable(first, "v/.ATTRIBUTES/VARIABLE_VALUE"), 4.0)
    finally:
        release.set()
    ckpt.sync()
