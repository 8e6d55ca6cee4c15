"""The README's PyTorch flow: an async save, then a load of the run's directory in the same
process, gets the checkpoint just saved, not the one before it (issue 38, item 4)."""

from __future__ import annotations

import threading

import torch

import trackpoint as tp
import trackpoint.torch as tpt


def _held_async() -> tp.CheckpointOptions:
    # The write callback holds the background write open for a moment, so the loads below
    # happen while it is in flight, as they would after a large save.
    release = threading.Event()
    threading.Timer(0.4, release.set).start()
    return tp.CheckpointOptions(enable_async=True, experimental_write_callbacks=[lambda: release.wait(30)])


def _run(tmp_path) -> tuple[torch.nn.Linear, tpt.Checkpoint, tp.CheckpointManager]:
    model = torch.nn.Linear(3, 2)
    ckpt = tpt.Checkpoint(model=model)
    manager = tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=3)
    with torch.no_grad():
        model.weight.fill_(1.0)
    manager.save()
    with torch.no_grad():
        model.weight.fill_(2.0)
    manager.save(options=_held_async())
    return model, ckpt, manager


def test_load_state_dict_of_the_directory_waits_for_the_async_save(tmp_path) -> None:
    _, ckpt, _ = _run(tmp_path)
    fresh = torch.nn.Linear(3, 2)
    tpt.load_state_dict(fresh, str(tmp_path), strict=True)
    assert torch.equal(fresh.weight, torch.full((2, 3), 2.0))
    ckpt.sync()


def test_restore_of_manager_latest_checkpoint_gets_the_async_save(tmp_path) -> None:
    _, ckpt, manager = _run(tmp_path)
    fresh = torch.nn.Linear(3, 2)
    tpt.Checkpoint(model=fresh).restore(manager.latest_checkpoint).assert_consumed()
    assert torch.equal(fresh.weight, torch.full((2, 3), 2.0))
    ckpt.sync()
