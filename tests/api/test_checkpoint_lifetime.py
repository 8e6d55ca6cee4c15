"""A checkpoint and what it holds are freed as soon as the last reference goes: no cycles.

Each test runs with the garbage collector disabled, so only reference counting can free
anything: an object kept alive here sits in a reference cycle (or is really still held).
"""

from __future__ import annotations

import gc
import pathlib
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np
import pytest

import trackpoint as tp


def _variables() -> dict[str, tp.Variable]:
    return {"v": tp.Variable(np.ones(3, np.float32)), "w": tp.Variable(2.0)}


def _just_made(ckpt: tp.Checkpoint, tmp_path: pathlib.Path) -> None:
    del ckpt, tmp_path


def _saved(ckpt: tp.Checkpoint, tmp_path: pathlib.Path) -> None:
    ckpt.save(str(tmp_path / "s"))
    ckpt.save(str(tmp_path / "s"))  # the second save replays the first's plan


def _written(ckpt: tp.Checkpoint, tmp_path: pathlib.Path) -> None:
    ckpt.write(str(tmp_path / "w"))


def _saved_async(ckpt: tp.Checkpoint, tmp_path: pathlib.Path) -> None:
    ckpt.save(str(tmp_path / "a"), tp.CheckpointOptions(enable_async=True))
    ckpt.sync()


def _restored(ckpt: tp.Checkpoint, tmp_path: pathlib.Path) -> None:
    path = ckpt.save(str(tmp_path / "r"))
    ckpt.restore(path).assert_consumed()
    ckpt.restore(path).assert_consumed()  # replayed


def _restored_with_values_pending(ckpt: tp.Checkpoint, tmp_path: pathlib.Path) -> None:
    source = tp.Checkpoint(v=tp.Variable(np.zeros(3, np.float32)), w=tp.Variable(0.0), later=tp.Variable(5.0))
    ckpt.restore(source.save(str(tmp_path / "p"))).expect_partial()  # 'later' waits on the checkpoint


def _managed(ckpt: tp.Checkpoint, tmp_path: pathlib.Path) -> None:
    manager = tp.CheckpointManager(ckpt, str(tmp_path / "m"), max_to_keep=1)
    manager.save()
    manager.save(options=tp.CheckpointOptions(enable_async=True))
    manager.sync()
    manager.restore_or_initialize()


@pytest.mark.parametrize(
    "use",
    [_just_made, _saved, _written, _saved_async, _restored, _restored_with_values_pending, _managed],
    ids=lambda f: f.__name__.strip("_"),
)
def test_checkpoint_without_root_is_freed_with_its_variables_at_once(
    tmp_path, no_gc, use: Callable[[tp.Checkpoint, pathlib.Path], None]
) -> None:
    variables = _variables()
    ckpt = tp.Checkpoint(**variables)
    use(ckpt, tmp_path)
    refs = [weakref.ref(ckpt), *map(weakref.ref, variables.values())]
    del ckpt, variables
    assert [ref() is None for ref in refs] == [True] * len(refs)


def test_a_restore_status_and_its_coordinator_are_freed_with_the_checkpoint(tmp_path, no_gc) -> None:
    ckpt = tp.Checkpoint(**_variables())
    status = ckpt.restore(ckpt.save(str(tmp_path / "c")))
    refs = [weakref.ref(ckpt), weakref.ref(status), weakref.ref(status._coordinator)]
    del ckpt, status
    assert [ref() is None for ref in refs] == [True, True, True]


def test_checkpoint_with_root_is_freed_and_keeps_nothing_alive(tmp_path, no_gc) -> None:
    root = tp.Module()
    root.v = tp.Variable(1.0)
    ckpt = tp.Checkpoint(root, extra=tp.Variable(2.0))
    ckpt.restore(ckpt.save(str(tmp_path / "c"))).assert_consumed()
    refs = [weakref.ref(ckpt), weakref.ref(root), weakref.ref(root.v)]
    del ckpt, root
    assert [ref() is None for ref in refs] == [True, True, True]


def test_the_async_save_thread_ends_when_its_checkpoint_is_freed(tmp_path) -> None:
    # Whichever threads the save started (not a thread name): each must end once the checkpoint goes.
    before = set(threading.enumerate())
    ckpt = tp.Checkpoint(v=tp.Variable(1.0))
    ckpt.save(str(tmp_path / "c"), tp.CheckpointOptions(enable_async=True))
    (thread,) = set(threading.enumerate()) - before  # an async save runs in one background thread
    del ckpt  # a save may still be running: the thread finishes it, then ends
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert tp.latest_checkpoint(str(tmp_path)) == str(tmp_path / "c-1")


@pytest.mark.slow  # 200 checkpoints with an async save each, four times: seconds
@pytest.mark.parametrize("how", ["write", "save", "manager", "cycle"])
def test_many_checkpoints_with_one_async_save_each_leave_no_thread_behind(tmp_path, how: str) -> None:
    # The case: 2,000 such checkpoints left 2,000 threads (and their stacks) behind.
    def writers() -> set[threading.Thread]:
        return set(threading.enumerate())  # every thread, not those of one name: none may be left behind

    options = tp.CheckpointOptions(enable_async=True)
    before = writers()
    for i in range(200):
        model = tp.Module()
        model.v = tp.Variable(np.zeros(256, np.float32))
        ckpt = tp.Checkpoint(model=model)
        if how == "write":
            ckpt.write(str(tmp_path / f"w{i}"), options)
        elif how == "save":
            ckpt.save(str(tmp_path / f"s{i}" / "ckpt"), options)
        elif how == "manager":
            tp.CheckpointManager(ckpt, str(tmp_path / f"m{i}"), max_to_keep=1).save(options=options)
        else:  # a reference cycle: only the garbage collector frees it
            model.owner = tp.NoDependency(ckpt)
            ckpt.write(str(tmp_path / f"c{i}"), options)
        del model, ckpt
    gc.collect()
    deadline = time.monotonic() + 60  # the last writes finish (slowly on a loaded machine); then every thread ends
    while (left := writers() - before) and time.monotonic() < deadline:
        for thread in left:
            if thread.ident is None:  # started but not running yet: it cannot be joined until it runs
                time.sleep(0.001)
            else:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert writers() <= before
