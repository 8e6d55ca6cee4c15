"""Every save is accounted for, and the manager deletes nothing outside its directory.

The disk-full case runs on a real, small tmpfs (mounting needs root; otherwise skipped,
and the injected-ENOSPC test still runs).
"""

from __future__ import annotations

import builtins
import errno
import os
import warnings

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import mounted_tmpfs


def _manager(directory, max_to_keep: int = 1) -> tp.CheckpointManager:
    ckpt = tp.Checkpoint(v=tp.Variable(np.arange(64, dtype=np.float32)))
    return tp.CheckpointManager(ckpt, str(directory), max_to_keep=max_to_keep)


def _bundle(prefix: str) -> list[str]:
    tp.save_tensors(prefix, {"x": np.zeros(4, np.float32)})
    return [prefix + ".index", prefix + ".data-00000-of-00001"]


def _agrees_with_disk(manager: tp.CheckpointManager) -> None:
    state = tp.get_checkpoint_state(manager.directory)
    listed = list(state.all_model_checkpoint_paths) if state else []
    assert manager.checkpoints == listed
    assert manager.latest_checkpoint == (state.model_checkpoint_path if state else None)


# -- hostile state files ------------------------------------------------------------------


def test_a_state_file_naming_paths_outside_the_directory_deletes_nothing_there(tmp_path) -> None:
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    (run / "sub").symlink_to(elsewhere, target_is_directory=True)
    victims = _bundle(str(elsewhere / "x")) + _bundle(str(elsewhere / "y")) + _bundle(str(elsewhere / "z"))
    (run / "checkpoint").write_text(
        'model_checkpoint_path: "sub/z"\n'
        'all_model_checkpoint_paths: "../elsewhere/x"\n'
        f'all_model_checkpoint_paths: "{elsewhere / "y"}"\n'
        'all_model_checkpoint_paths: "sub/z"\n'
    )
    with pytest.warns(UserWarning, match=r"lists 3 checkpoint\(s\) outside .*never deletes them"):
        manager = _manager(run, max_to_keep=1)
    assert manager.checkpoints == []
    for _ in range(3):
        manager.save()
    assert all(os.path.exists(path) for path in victims)
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-3"]
    assert sorted(os.listdir(run)) == ["checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index", "sub"]


def test_entries_inside_the_directory_are_still_swept(tmp_path) -> None:
    # ".." that comes back into the directory is inside it: the real paths decide.
    first = _manager(tmp_path, max_to_keep=5)
    saved = first.save()
    (tmp_path / "checkpoint").write_text(
        f'model_checkpoint_path: "../{tmp_path.name}/ckpt-1"\nall_model_checkpoint_paths: "../{tmp_path.name}/ckpt-1"\n'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        manager = _manager(tmp_path, max_to_keep=1)
    manager.save()
    manager.save()
    assert not os.path.exists(saved + ".index")


# -- the state file cannot be written -----------------------------------------------------


def test_an_unwritable_state_file_raises_write_error_and_the_manager_agrees_with_disk(tmp_path, monkeypatch) -> None:
    manager = _manager(tmp_path, max_to_keep=2)
    manager.save()
    manager.save()
    real_open = open

    def full_disk(path, *args, **kwargs):
        if os.path.basename(str(path)).startswith("checkpoint.tp-tmp-"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full_disk)  # whichever module writes the state file
    with pytest.raises(tp.errors.WriteError, match=r"ckpt-3 was written but could not be recorded, so it was removed"):
        manager.save()
    monkeypatch.undo()
    _agrees_with_disk(manager)
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-1", "ckpt-2"]
    assert not os.path.exists(str(tmp_path / "ckpt-3.index"))
    manager.save()
    _agrees_with_disk(manager)
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-2", "ckpt-4"]


@pytest.fixture
def small_fs(tmp_path):
    """A directory on a real 1 MiB tmpfs."""
    with mounted_tmpfs(tmp_path / "fs", "1m") as mount:
        yield mount


def _fill(directory) -> None:
    with open(os.path.join(directory, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_full_disk_when_the_state_file_is_written(small_fs) -> None:
    manager = _manager(small_fs, max_to_keep=1)
    first = manager.save()
    # The callback fills the disk once the checkpoint's files are complete, so the next thing
    # written, the state file, meets a real ENOSPC.
    options = tp.CheckpointOptions(experimental_write_callbacks=[lambda path: _fill(small_fs)])
    with pytest.raises(tp.errors.WriteError, match="No space left on device") as info:
        manager.save(options=options)
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    _agrees_with_disk(manager)
    assert manager.checkpoints == [first] and manager.latest_checkpoint == first
    assert not os.path.exists(os.path.join(small_fs, "ckpt-2.index"))  # unrecorded, so removed
    tp.Checkpoint(v=tp.Variable(np.zeros(64, np.float32))).restore(first).assert_consumed()
    os.unlink(os.path.join(small_fs, "filler"))
    manager.save()
    _agrees_with_disk(manager)
    assert sorted(os.listdir(small_fs)) == ["checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index"]


def test_checkpoint_save_with_an_unwritable_state_file_raises_write_error(tmp_path, monkeypatch) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(1.0))
    first = ckpt.save(str(tmp_path / "ckpt"))

    real_open = open

    def refuse(path, *args, **kwargs):
        if os.path.basename(str(path)).startswith("checkpoint.tp-tmp-"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refuse)  # whichever module writes the state file
    with pytest.raises(tp.errors.WriteError, match=r"ckpt-2 is complete, but the state file .* still names what"):
        ckpt.save(str(tmp_path / "ckpt"))
    monkeypatch.undo()
    assert tp.latest_checkpoint(str(tmp_path)) == first
    ckpt.restore(str(tmp_path / "ckpt-2")).assert_consumed()


# -- write callbacks that raise -----------------------------------------------------------


@pytest.mark.parametrize("enable_async", [False, True])
def test_a_raising_write_callback_still_records_and_sweeps(tmp_path, enable_async: bool) -> None:
    manager = _manager(tmp_path, max_to_keep=1)
    seen = []

    def callback(path: str) -> None:
        seen.append(path)
        raise RuntimeError("upload failed")

    options = tp.CheckpointOptions(experimental_write_callbacks=[callback], enable_async=enable_async)
    for _ in range(4):
        with pytest.raises(RuntimeError, match="upload failed"):
            manager.save(options=options)
            manager.sync()
        _agrees_with_disk(manager)
        assert manager.latest_checkpoint == seen[-1]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-4.data-00000-of-00001", "ckpt-4.index"]


def test_a_latest_checkpoint_outside_the_directory_is_restored_and_said(tmp_path) -> None:
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    source = tp.Checkpoint(v=tp.Variable(np.full(64, 7.0, np.float32)))
    source.write(str(elsewhere / "x"))
    (run / "checkpoint").write_text('model_checkpoint_path: "../elsewhere/x"\n')
    with pytest.warns(UserWarning, match=r"latest checkpoint it names, '.*elsewhere/x', is outside"):
        manager = _manager(run)
    assert manager.restore_or_initialize() == str(run / "../elsewhere/x")
    assert np.all(manager.checkpoint.v.numpy() == 7.0)
    status = manager.checkpoint.restore(str(run))  # the same checkpoint, through the directory
    assert any("elsewhere" in note and "outside" in note for note in status.report().notes)
    manager.save()
    assert os.path.exists(str(elsewhere / "x.index"))  # read, never deleted
