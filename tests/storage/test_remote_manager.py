"""Checkpoint.save() and CheckpointManager at s3:// URLs: the state object swapped by compare-and-swap
(S3 If-Match), max_to_keep deleting the index first, and what killed writers left cleared."""

from __future__ import annotations

import time

import numpy as np
import pytest

import trackpoint as tp
from tests.storage.together import save_together
from trackpoint._storage import object_bundles

KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def _model(value: float = 0.0) -> tp.Module:
    m = tp.Module()
    m.w = tp.Variable(np.full((64, 64), value, np.float32))
    return m


def _names(s3, directory: str) -> list[str]:
    s3.invalidate_cache()
    return sorted(p.rsplit("/", 1)[1] for p in s3.ls(directory[5:]))


def test_save_points_the_state_object_at_the_new_checkpoint(bucket, s3) -> None:
    ckpt = tp.Checkpoint(model=_model(1.0))
    first = ckpt.save(f"{bucket}/run/ckpt")
    second = ckpt.save(f"{bucket}/run/ckpt")
    assert (first, second) == (f"{bucket}/run/ckpt-1", f"{bucket}/run/ckpt-2")
    assert tp.latest_checkpoint(f"{bucket}/run") == second
    state = s3.cat_file(f"{bucket[5:]}/run/checkpoint").decode()
    assert 'model_checkpoint_path: "ckpt-2"' in state  # relative, as TF writes it
    restored = _model()
    tp.Checkpoint(model=restored).restore(f"{bucket}/run").assert_consumed()  # a directory URL
    assert restored.w.numpy()[0, 0] == 1.0
    assert tp.get_checkpoint_state(f"{bucket}/run").all_model_checkpoint_paths == [second]


def test_a_manager_keeps_max_to_keep_and_deletes_the_index_and_data_of_older_ones(bucket, s3) -> None:
    model = _model()
    manager = tp.CheckpointManager(tp.Checkpoint(model=model), f"{bucket}/run/", max_to_keep=2)
    for step in range(1, 5):
        model.w.assign(np.full((64, 64), float(step), np.float32))
        manager.save()
    assert manager.checkpoints == [f"{bucket}/run/ckpt-3", f"{bucket}/run/ckpt-4"]
    assert _names(s3, f"{bucket}/run") == [
        "checkpoint",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
    ]
    again = tp.CheckpointManager(tp.Checkpoint(model=_model()), f"{bucket}/run", max_to_keep=2)
    assert again.checkpoints == manager.checkpoints
    assert again.restore_or_initialize() == f"{bucket}/run/ckpt-4"
    assert again.checkpoint.model.w.numpy()[0, 0] == 4.0


def test_max_to_keep_un_commits_a_checkpoint_before_deleting_its_data(bucket, s3, proxy) -> None:
    """The index goes first: at no instant is there an index whose data is gone."""
    manager = tp.CheckpointManager(tp.Checkpoint(model=_model()), f"{bucket}/run", max_to_keep=1)
    manager.save()
    proxy.requests.clear()
    manager.save()
    deleted = [path.rsplit("/", 1)[1] for method, path, _ in proxy.requests if method == "DELETE"]
    assert deleted == ["ckpt-1.index", "ckpt-1.data-00000-of-00001"], proxy.requests


@pytest.mark.slow  # two managers' saves through the S3 server: seconds
def test_two_managers_swapping_one_state_object_lose_neither_update(bucket, s3, proxy) -> None:
    """Two managers in one directory (a job and its zombie, say), saving in turns and at once:
    the state object lists every checkpoint either committed, none that is gone. The proxy passes
    one write at a time, as S3 decides conditional writes (moto alone does not)."""
    proxy.serialise_writes = True
    a = tp.CheckpointManager(tp.Checkpoint(model=_model(1.0)), f"{bucket}/run", max_to_keep=None, checkpoint_name="a")
    b = tp.CheckpointManager(tp.Checkpoint(model=_model(2.0)), f"{bucket}/run", max_to_keep=None, checkpoint_name="b")
    a.save()  # b has not seen this one: its swap against the absent state object fails, and it merges
    b.save()
    save_together([a, b], rounds=4)
    listed = tp.get_checkpoint_state(f"{bucket}/run").all_model_checkpoint_paths
    expected = {f"{bucket}/run/{name}-{n}" for name in "ab" for n in range(1, 6)}
    assert set(listed) == expected


@pytest.mark.slow  # two managers' saves through the S3 server: seconds
def test_a_conflicting_manager_does_not_revive_a_checkpoint_the_other_deleted(bucket, s3) -> None:
    a = tp.CheckpointManager(tp.Checkpoint(model=_model(1.0)), f"{bucket}/run", max_to_keep=1, checkpoint_name="a")
    a.save()
    b = tp.CheckpointManager(tp.Checkpoint(model=_model(2.0)), f"{bucket}/run", max_to_keep=None, checkpoint_name="b")
    assert b.checkpoints == [f"{bucket}/run/a-1"]
    a.save()  # deletes a-1, which b still lists
    b.save()
    listed = tp.get_checkpoint_state(f"{bucket}/run").all_model_checkpoint_paths
    assert f"{bucket}/run/a-1" not in listed
    for path in listed:
        assert s3.exists(path[5:] + ".index")


def test_the_state_object_swap_is_conditional_on_its_version(bucket, s3) -> None:
    from trackpoint._format.state_file import read_state_versioned, write_state

    directory = f"{bucket}/run"
    assert write_state(directory, f"{directory}/ckpt-1", version=None)
    assert not write_state(directory, f"{directory}/ckpt-9", version=None)  # it exists now
    state, version = read_state_versioned(directory)
    assert write_state(directory, f"{directory}/ckpt-2", version=version)
    assert not write_state(directory, f"{directory}/ckpt-3", version=version)  # that version is gone
    assert tp.get_checkpoint_state(directory).model_checkpoint_path == f"{directory}/ckpt-2"
    assert state.model_checkpoint_path == f"{directory}/ckpt-1"


def test_a_manager_removes_data_a_dead_writer_left_older_than_its_newest_checkpoint(bucket, s3) -> None:
    run = f"{bucket[5:]}/run"
    from trackpoint._storage.object_bundles import remove_orphans

    s3.pipe_file(f"{run}/ckpt-9.data-00000-of-00001", b"left by a killed writer")
    time.sleep(1.1)  # object times are in whole seconds
    manager = tp.CheckpointManager(tp.Checkpoint(model=_model()), f"{bucket}/run", max_to_keep=3)
    manager.save()
    assert "ckpt-9.data-00000-of-00001" not in _names(s3, f"{bucket}/run")
    time.sleep(1.1)
    s3.pipe_file(f"{run}/ckpt-7.data-00000-of-00001", b"a live writer's, younger than ckpt-1")
    # The sweep a save ends with, run again: ckpt-7 is younger than the newest checkpoint.
    assert remove_orphans(f"{bucket}/run") == []
    assert "ckpt-7.data-00000-of-00001" in _names(s3, f"{bucket}/run")
    time.sleep(1.1)
    manager.save()  # ckpt-2 is committed after ckpt-7 was put: its writer had its chance
    names = _names(s3, f"{bucket}/run")
    assert "ckpt-7.data-00000-of-00001" not in names
    assert {"ckpt-1.index", "ckpt-2.index"} <= set(names)


def test_a_save_to_a_prefix_a_writer_left_long_ago_clears_it_and_one_left_just_now_is_refused(
    bucket, s3, monkeypatch
) -> None:
    run = f"{bucket[5:]}/run"
    s3.pipe_file(f"{run}/ckpt-1.data-00000-of-00001", b"left by a killed writer")
    ckpt = tp.Checkpoint(model=_model(3.0))
    with pytest.raises(tp.errors.WriteError, match="another writer may be committing"):
        ckpt.write(f"{bucket}/run/ckpt-1")
    assert _names(s3, f"{bucket}/run") == ["ckpt-1.data-00000-of-00001"]
    monkeypatch.setattr(object_bundles, "ABANDONED_AGE", 0.0)  # as if a quarter of an hour went by
    time.sleep(1.1)
    ckpt.write(f"{bucket}/run/ckpt-1")
    assert tp.load_variable(f"{bucket}/run/ckpt-1", KEY)[0, 0] == 3.0


def test_a_manager_on_a_store_without_conditional_writes_is_refused_before_saving(tmp_path) -> None:
    pytest.importorskip("fsspec")
    ckpt = tp.Checkpoint(model=_model())
    with pytest.raises(tp.errors.InvalidArgumentError, match="conditional writes"):
        tp.CheckpointManager(ckpt, "memory://run", max_to_keep=2)
    with pytest.raises(tp.errors.InvalidArgumentError, match="conditional writes"):
        ckpt.save("memory://run/ckpt")
    assert int(ckpt.save_counter.numpy()) == 0


@pytest.mark.parametrize("saver", ["manager", "save"])
def test_a_numbered_save_skips_a_number_a_killed_writer_left_objects_under(bucket, s3, saver) -> None:
    """A job restarted from ckpt-1 after a kill inside the save of ckpt-2 (its data is up, its
    index is not) and of ckpt-3 (its index is up, the state object was not swapped): the next
    save is ckpt-4, and the counter says 4, instead of a refusal for a quarter of an hour."""
    run = f"{bucket}/run"
    ckpt = tp.Checkpoint(model=_model(1.0))
    ckpt.save(f"{run}/ckpt")
    s3.pipe_file(f"{run[5:]}/ckpt-2.data-00000-of-00001", b"left by a killed writer")
    tp.Checkpoint(model=_model(3.0)).write(f"{run}/ckpt-3")
    restarted = tp.Checkpoint(model=_model())
    restarted.restore(tp.latest_checkpoint(run))
    if saver == "manager":
        path = tp.CheckpointManager(restarted, run, max_to_keep=5).save()
    else:
        path = restarted.save(f"{run}/ckpt")
    assert path == f"{run}/ckpt-4" and int(restarted.save_counter.numpy()) == 4
    assert tp.latest_checkpoint(run) == path
    assert tp.load_variable(f"{run}/ckpt-3", KEY)[0, 0] == 3.0  # the other writer's, untouched
