"""Port of TensorFlow's ``tensorflow/python/checkpoint/checkpoint_management_test.py`` to trackpoint.

Source: the ``tensorflow/tensorflow`` copy of the file (26 test methods).

Translation: ``util.Checkpoint`` is ``tp.Checkpoint``; ``checkpoint_management.CheckpointManager``,
``latest_checkpoint`` and ``get_checkpoint_state`` are ``tp.CheckpointManager``,
``tp.latest_checkpoint`` and ``tp.get_checkpoint_state``; ``checkpoint_management.checkpoint_exists``
is :func:`_checkpoint_exists` (trackpoint has no such function; TF's checks for the ``.index``
file, or a file at the prefix itself); ``os.chdir`` is pytest's ``monkeypatch.chdir``. TF's
``mock.patch.object(checkpoint_management, "time")`` becomes :class:`_Clock` put in place of the
``time`` module that ``trackpoint.manager`` reads (a settable clock, the one stand-in these
ports use), and its ``mock.patch.object(logging, "warning")`` becomes ``pytest.warns`` (trackpoint
warns with ``UserWarning``). The state's repeated proto fields are compared as lists
(trackpoint's ``CheckpointState`` holds tuples).

Ported with a substitution:
    LatestCheckpointWithRelativePaths.testRelativePath: TF1 ``Saver.save(sess, path, global_step)``
        becomes ``tp.Checkpoint.save`` (numbered 1..3 instead of 0..2); the point, a state file in a
        relative directory that ``latest_checkpoint`` resolves, is unchanged.
    CheckpointStateTest.testFSPath: the state file that TF's ``update_checkpoint_state`` writes
        (verified with TF 2.21) is written by hand; the ``get_checkpoint_state(pathlib.Path)`` part is as in TF.

Left out:
    LatestCheckpointWithRelativePaths.testNameCollision: TF1 ``Saver`` (sharded, V1, "collides with" error).
    CheckpointStateTest.testAbsPath: ``generate_checkpoint_state_proto``, TF's state-proto builder; trackpoint has none.
    CheckpointStateTest.testRelPath: ``generate_checkpoint_state_proto``.
    CheckpointStateTest.testAllModelCheckpointPaths: ``generate_checkpoint_state_proto``.
    CheckpointStateTest.testUpdateCheckpointState: ``update_checkpoint_state``, a deprecated TF1 writer trackpoint does not expose.
    CheckpointStateTest.testUpdateCheckpointStateSaveRelativePaths: ``update_checkpoint_state_internal`` (private TF writer).
    SaverUtilsTest.testCheckpointExists: TF1 ``Saver`` V1/V2 formats and ``checkpoint_exists``.
    SaverUtilsTest.testGetCheckpointMtimes: TF1 ``Saver`` and ``get_checkpoint_mtimes``.
    SaverUtilsTest.testRemoveCheckpoint: TF1 ``Saver`` and ``remove_checkpoint``.
"""

from __future__ import annotations

import os
import pathlib

import pytest

import trackpoint as tp
import trackpoint.manager as tp_manager


def _checkpoint_exists(prefix: str) -> bool:
    """TF's ``checkpoint_management.checkpoint_exists``: the V2 ``.index`` file (or a V1 file at the prefix)."""
    return os.path.exists(prefix + ".index") or os.path.isfile(prefix)


class _Clock:
    """A settable clock with the ``time()`` of the ``time`` module (TF's ``mock_time``)."""

    def __init__(self) -> None:
        self.value = 0.0

    def time(self) -> float:
        return self.value


@pytest.fixture
def mock_time(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(tp_manager, "time", clock)
    return clock


# -- LatestCheckpointWithRelativePaths ----------------------------------------------------


def test_relative_path(tmp_path, monkeypatch) -> None:
    """Ports LatestCheckpointWithRelativePaths.testRelativePath (tp.Checkpoint for TF1's Saver)."""
    monkeypatch.chdir(tmp_path)
    # Save training snapshots to a relative path.
    traindir = "train"
    os.mkdir(traindir)
    filename = "snapshot"
    filepath = os.path.join(traindir, filename)

    v0 = tp.Variable(0.0)
    save = tp.Checkpoint(v0=v0)
    # Record a short training history.
    save.save(filepath)
    v0.assign_add(1.0)
    save.save(filepath)
    v0.assign_add(1.0)
    save.save(filepath)

    # New objects with different initialization.
    v0 = tp.Variable(-1.0)
    save = tp.Checkpoint(v0=v0)
    # Get the most recent checkpoint name from the training history file.
    name = tp.latest_checkpoint(traindir)
    assert name is not None
    # Restore "v0" from that checkpoint.
    save.restore(name)
    assert v0.numpy() == 2.0


# -- CheckpointStateTest ------------------------------------------------------------------


def _get_test_dir(tmp_path: pathlib.Path, dirname: str) -> str:
    test_dir = tmp_path / dirname
    test_dir.mkdir(parents=True, exist_ok=True)
    return str(test_dir)


def test_fs_path(tmp_path, monkeypatch) -> None:
    """Ports CheckpointStateTest.testFSPath."""
    save_dir = _get_test_dir(tmp_path, "fspath")
    monkeypatch.chdir(save_dir)
    # Make a temporary train directory.
    train_dir = "train"
    os.mkdir(train_dir)
    abs_path = os.path.join(save_dir, "model-0")
    rel_path = os.path.join("train", "model-2")
    # What TF's update_checkpoint_state(train_dir, rel_path, all_model_checkpoint_paths=[abs_path,
    # rel_path]) writes (TF 2.21): paths relative to the train directory, absolute ones as given.
    with open(os.path.join(train_dir, "checkpoint"), "w") as f:
        f.write(
            f'model_checkpoint_path: "model-2"\n'
            f'all_model_checkpoint_paths: "{abs_path}"\n'
            f'all_model_checkpoint_paths: "model-2"\n'
        )
    ckpt = tp.get_checkpoint_state(pathlib.Path(train_dir))
    assert ckpt.model_checkpoint_path == rel_path


def test_check_point_state_fails_when_incomplete(tmp_path, monkeypatch) -> None:
    """Ports CheckpointStateTest.testCheckPointStateFailsWhenIncomplete."""
    save_dir = _get_test_dir(tmp_path, "checkpoint_state_fails_when_incomplete")
    monkeypatch.chdir(save_dir)
    ckpt_path = os.path.join(save_dir, "checkpoint")
    with open(ckpt_path, "w") as ckpt_file:
        ckpt_file.write("")
    with pytest.raises(ValueError):
        tp.get_checkpoint_state(save_dir)


def test_check_point_completes_relative_paths(tmp_path, monkeypatch) -> None:
    """Ports CheckpointStateTest.testCheckPointCompletesRelativePaths."""
    save_dir = _get_test_dir(tmp_path, "checkpoint_completes_relative_paths")
    monkeypatch.chdir(save_dir)
    ckpt_path = os.path.join(save_dir, "checkpoint")
    with open(ckpt_path, "w") as ckpt_file:
        ckpt_file.write("""
        model_checkpoint_path: "./model.ckpt-687529"
        all_model_checkpoint_paths: "./model.ckpt-687500"
        all_model_checkpoint_paths: "./model.ckpt-687529"
        """)
    ckpt = tp.get_checkpoint_state(save_dir)
    assert ckpt.model_checkpoint_path == os.path.join(save_dir, "./model.ckpt-687529")
    assert ckpt.all_model_checkpoint_paths[0] == os.path.join(save_dir, "./model.ckpt-687500")
    assert ckpt.all_model_checkpoint_paths[1] == os.path.join(save_dir, "./model.ckpt-687529")


# -- CheckpointManagerTest ----------------------------------------------------------------


def test_deletion(tmp_path) -> None:
    """Ports CheckpointManagerTest.testDeletion."""
    checkpoint = tp.Checkpoint()
    manager = tp.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=3)
    first_path = manager.save()
    second_path = manager.save()
    third_path = manager.save()
    fourth_path = manager.save()
    assert _checkpoint_exists(fourth_path)
    assert _checkpoint_exists(third_path)
    assert _checkpoint_exists(second_path)
    assert not _checkpoint_exists(first_path)


def test_keep_all(tmp_path) -> None:
    """Ports CheckpointManagerTest.testKeepAll."""
    checkpoint = tp.Checkpoint()
    directory = str(tmp_path)
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=None)
    first_path = manager.save()
    second_path = manager.save()
    third_path = manager.save()
    assert _checkpoint_exists(third_path)
    assert _checkpoint_exists(second_path)
    assert _checkpoint_exists(first_path)
    assert third_path == manager.latest_checkpoint
    assert [first_path, second_path, third_path] == manager.checkpoints
    del manager
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=None)
    fourth_path = manager.save()
    assert [first_path, second_path, third_path, fourth_path] == manager.checkpoints
    del manager
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=3)
    assert [first_path, second_path, third_path, fourth_path] == manager.checkpoints
    assert _checkpoint_exists(fourth_path)
    assert _checkpoint_exists(third_path)
    assert _checkpoint_exists(second_path)
    assert _checkpoint_exists(first_path)
    fifth_path = manager.save()
    assert [third_path, fourth_path, fifth_path] == manager.checkpoints
    assert _checkpoint_exists(fifth_path)
    assert _checkpoint_exists(fourth_path)
    assert _checkpoint_exists(third_path)
    assert not _checkpoint_exists(second_path)
    assert not _checkpoint_exists(first_path)


def test_save_restore_state(tmp_path, mock_time) -> None:
    """Ports CheckpointManagerTest.testSaveRestoreState."""
    directory = str(tmp_path)
    mock_time.value = 3.0
    checkpoint = tp.Checkpoint()
    first_manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2)
    first_time = 10000.0
    first_name = os.path.join(directory, "ckpt-1")
    mock_time.value = first_time
    first_manager.save()
    state = tp.get_checkpoint_state(directory)
    second_time = first_time + 3610.0
    second_name = os.path.join(directory, "ckpt-2")
    mock_time.value = second_time
    first_manager.save()
    state = tp.get_checkpoint_state(directory)
    assert [first_time, second_time] == list(state.all_model_checkpoint_timestamps)
    assert [first_name, second_name] == first_manager.checkpoints
    assert second_name == first_manager.latest_checkpoint
    del first_manager

    second_manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2, keep_checkpoint_every_n_hours=1.5)
    assert [first_name, second_name] == second_manager.checkpoints
    assert second_name == second_manager.latest_checkpoint
    third_name = os.path.join(directory, "ckpt-3")
    third_time = second_time + 3600.0 * 0.2
    mock_time.value = third_time
    second_manager.save()
    assert _checkpoint_exists(first_name)
    assert _checkpoint_exists(second_name)
    assert [second_name, third_name] == second_manager.checkpoints
    state = tp.get_checkpoint_state(directory)
    assert first_time == state.last_preserved_timestamp
    fourth_time = third_time + 3600.0 * 0.5
    mock_time.value = fourth_time
    fourth_name = os.path.join(directory, "ckpt-4")
    second_manager.save()
    assert _checkpoint_exists(first_name)
    assert not _checkpoint_exists(second_name)
    assert [third_name, fourth_name] == second_manager.checkpoints
    fifth_time = fourth_time + 3600.0 * 0.5
    mock_time.value = fifth_time
    fifth_name = os.path.join(directory, "ckpt-5")
    second_manager.save()
    assert [fourth_name, fifth_name] == second_manager.checkpoints
    state = tp.get_checkpoint_state(directory)
    assert first_time == state.last_preserved_timestamp
    del second_manager
    third_manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2, keep_checkpoint_every_n_hours=1.5)
    assert fifth_name == third_manager.latest_checkpoint
    mock_time.value += 10.0
    third_manager.save()
    sixth_name = os.path.join(directory, "ckpt-6")
    state = tp.get_checkpoint_state(directory)
    assert fourth_time == state.last_preserved_timestamp
    assert _checkpoint_exists(first_name)
    assert _checkpoint_exists(fourth_name)
    assert _checkpoint_exists(fifth_name)
    assert _checkpoint_exists(sixth_name)
    assert not _checkpoint_exists(second_name)
    assert not _checkpoint_exists(third_name)
    assert [fifth_name, sixth_name] == third_manager.checkpoints


def test_continue_from_unmanaged(tmp_path) -> None:
    """Ports CheckpointManagerTest.testContinueFromUnmanaged."""
    directory = str(tmp_path)
    prefix = os.path.join(directory, "unusual_prefix")
    checkpoint = tp.Checkpoint()
    first_path = checkpoint.save(prefix)
    second_path = checkpoint.save(prefix)
    del checkpoint
    checkpoint = tp.Checkpoint()
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2)
    checkpoint.restore(manager.latest_checkpoint).run_restore_ops()
    assert 2 == checkpoint.save_counter.numpy()
    third_path = manager.save()
    assert [third_path] == manager.checkpoints
    fourth_path = manager.save()
    assert [third_path, fourth_path] == manager.checkpoints
    fifth_path = manager.save()
    assert [fourth_path, fifth_path] == manager.checkpoints
    assert _checkpoint_exists(first_path)
    assert _checkpoint_exists(second_path)
    assert not _checkpoint_exists(third_path)
    assert _checkpoint_exists(fourth_path)
    assert _checkpoint_exists(fifth_path)


def test_clock_reset(tmp_path, mock_time) -> None:
    """Ports CheckpointManagerTest.testClockReset."""
    directory = str(tmp_path)
    mock_time.value = 10000.0
    checkpoint = tp.Checkpoint()
    first_manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=1, keep_checkpoint_every_n_hours=1.0)
    first_path = first_manager.save()
    mock_time.value += 3600.0
    second_path = first_manager.save()
    mock_time.value += 3600.0
    third_path = first_manager.save()
    assert not _checkpoint_exists(first_path)
    assert _checkpoint_exists(second_path)
    assert _checkpoint_exists(third_path)
    assert [third_path] == first_manager.checkpoints
    state = tp.get_checkpoint_state(directory)
    assert 13600.0 == state.last_preserved_timestamp
    # Set the clock back in time.
    mock_time.value = 5000.0
    del first_manager
    with pytest.warns(UserWarning, match="behind the last preserved checkpoint timestamp"):
        second_manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=1)
    # Err on the side of keeping checkpoints around when we're not sure whether they were
    # preserved or not due to clock funkiness.
    assert _checkpoint_exists(second_path)
    # We know about the existing checkpoints, but they'll never be deleted and so won't go in
    # the CheckpointState proto on save.
    assert third_path == second_manager.latest_checkpoint
    assert [] == second_manager.checkpoints
    mock_time.value += 10.0
    fourth_path = second_manager.save()
    assert _checkpoint_exists(second_path)
    assert _checkpoint_exists(third_path)
    assert fourth_path == second_manager.latest_checkpoint
    assert [fourth_path] == second_manager.checkpoints
    mock_time.value += 10.0
    fifth_path = second_manager.save()
    assert _checkpoint_exists(second_path)
    assert _checkpoint_exists(third_path)
    assert [fifth_path] == second_manager.checkpoints
    state = tp.get_checkpoint_state(directory)
    assert 5000.0 == state.last_preserved_timestamp
    assert [5020.0] == list(state.all_model_checkpoint_timestamps)


def test_custom_numbering(tmp_path) -> None:
    """Ports CheckpointManagerTest.testCustomNumbering."""
    directory = str(tmp_path)
    step = tp.Variable(0, dtype="int64")
    checkpoint = tp.Checkpoint(step=step)
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2)
    for i in range(5):
        path = manager.save(checkpoint_number=step)
        expected_suffix = f"-{2 * i}"
        assert path.endswith(expected_suffix), f"{path} should have suffix {expected_suffix}"
        step.assign_add(2)
    assert 5 == checkpoint.save_counter.numpy()
    # Test regular integers.
    last_path = manager.save(checkpoint_number=32)
    assert "-32" in last_path
    assert last_path == manager.latest_checkpoint
    assert last_path == tp.latest_checkpoint(directory)
    state = tp.get_checkpoint_state(directory)
    # Only the most recent two checkpoints are saved.
    assert [path, last_path] == list(state.all_model_checkpoint_paths)


def test_custom_checkpoint_prefix(tmp_path) -> None:
    """Ports CheckpointManagerTest.testCustomCheckpointPrefix."""
    directory = str(tmp_path)
    checkpoint = tp.Checkpoint()
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2, checkpoint_name="ckpt_name")
    path = manager.save(checkpoint_number=5)
    assert os.path.basename(path) == "ckpt_name-5"
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2)
    path = manager.save(checkpoint_number=5)
    assert os.path.basename(path) == "ckpt-5"


def test_restore_or_initialize(tmp_path) -> None:
    """Ports CheckpointManagerTest.testRestoreOrInitialize."""
    directory = str(tmp_path)

    # Create a checkpoint for initializing.
    init_prefix = os.path.join(directory, "init")
    init_v = tp.Variable(2.0)
    init_ckpt = tp.Checkpoint(v=init_v)
    init_path = init_ckpt.save(init_prefix)

    # Create the checkpoint manager.
    ckpt_dir = os.path.join(directory, "ckpt")
    v = tp.Variable(1.0)
    checkpoint = tp.Checkpoint(v=v)
    manager = tp.CheckpointManager(
        checkpoint,
        ckpt_dir,
        max_to_keep=None,
        init_fn=lambda: checkpoint.restore(init_path).run_restore_ops(),
    )

    # First call should call `init_fn`.
    assert manager.restore_or_initialize() is None
    assert 2.0 == v.numpy()

    # Save a checkpoint and second call should restore from the checkpoints.
    manager.save()
    assert manager.restore_or_initialize() is not None


def test_checkpoint_manager_fs_path_directory(tmp_path) -> None:
    """Ports CheckpointManagerTest.testCheckpointManagerFSpathDirectory."""
    directory = pathlib.Path(tmp_path)
    v = tp.Variable(0.0)
    checkpoint = tp.Checkpoint(v=v)
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2, checkpoint_name="ckpt_name")
    save_path = manager.save()
    expected = str(directory / "ckpt_name-1")
    assert expected == save_path

    restore_path = manager.restore_or_initialize()
    assert str(directory / "ckpt_name-1") == restore_path


def test_latest_checkpoint_fs_path_directory(tmp_path) -> None:
    """Ports CheckpointManagerTest.testLatestCheckpointFSpathDirectory."""
    directory = pathlib.Path(tmp_path)
    checkpoint = tp.Checkpoint()
    manager = tp.CheckpointManager(checkpoint, directory, max_to_keep=2, checkpoint_name="ckpt_name")
    manager.save()

    cp_dir = tp.latest_checkpoint(directory)
    assert str(directory / "ckpt_name-1") == cp_dir


def test_checkpoint_interval(tmp_path) -> None:
    """Ports CheckpointManagerTest.testCheckpointInterval."""
    v = tp.Variable(1.0)
    step_counter = tp.Variable(0)
    checkpoint = tp.Checkpoint(v=v)
    manager = tp.CheckpointManager(
        checkpoint,
        str(tmp_path),
        max_to_keep=None,
        step_counter=step_counter,
        checkpoint_interval=2,
    )

    # step_counter: 0, save an initial checkpoint.
    path = manager.save(check_interval=True)
    assert _checkpoint_exists(path)

    # step_counter: 1, no checkpoint saved.
    step_counter.assign_add(1)
    path = manager.save(check_interval=True)
    assert path is None

    # step_counter: 2, checkpoint saved.
    step_counter.assign_add(1)
    path = manager.save(check_interval=True)
    assert _checkpoint_exists(path)

    # no checkpoint saved when calling `save` with the same step counter.
    path = manager.save(check_interval=True)
    assert path is None

    # step_counter: 3, no checkpoint saved.
    step_counter.assign_add(1)
    path = manager.save(check_interval=True)
    assert path is None

    # Always save the checkpoint.
    path = manager.save(check_interval=False)
    assert _checkpoint_exists(path)


def test_checkpoint_interval_with_last_checkpoint_step(tmp_path) -> None:
    """Ports CheckpointManagerTest.testCheckpointIntervalWithLastCheckpointStep."""
    v = tp.Variable(1.0)
    step_counter = tp.Variable(1)
    checkpoint = tp.Checkpoint(v=v)
    manager = tp.CheckpointManager(
        checkpoint,
        str(tmp_path),
        max_to_keep=None,
        step_counter=step_counter,
        checkpoint_interval=2,
        last_checkpoint_step=1,
    )

    # step_counter: 1, no checkpoint saved.
    path = manager.save(check_interval=True)
    assert path is None

    # step_counter: 2, no checkpoint saved since the interval starts at 1.
    step_counter.assign_add(1)
    path = manager.save(check_interval=True)
    assert path is None

    # step_counter: 3, checkpoint saved.
    step_counter.assign_add(1)
    path = manager.save(check_interval=True)
    assert _checkpoint_exists(path)


def test_checkpoint_interval_with_restore(tmp_path) -> None:
    """Ports CheckpointManagerTest.testCheckpointIntervalWithRestore."""
    directory = str(tmp_path)
    v = tp.Variable(1.0)
    step_counter = tp.Variable(0)

    # Prepare a checkpoint.
    checkpoint = tp.Checkpoint(v=v)
    checkpoint.save(os.path.join(directory, "ckpt"))

    manager = tp.CheckpointManager(
        checkpoint,
        directory,
        max_to_keep=None,
        step_counter=step_counter,
        checkpoint_interval=2,
    )

    # Restore from the checkpoint.
    assert manager.restore_or_initialize() is not None

    # step_counter: 0, no checkpoint saved because it is restored from the checkpoint with the
    # same step.
    path = manager.save()
    assert path is None
