"""A restore whose prefix a ``checkpoint`` state file named notes when the checkpoint lies
outside that file's directory (links resolved): its bytes come from elsewhere."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import trackpoint as tp


def _state_file(directory: pathlib.Path, named: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "checkpoint").write_text(f'model_checkpoint_path: "{named}"\nall_model_checkpoint_paths: "{named}"\n')


@pytest.mark.parametrize("absolute", [True, False])
def test_a_checkpoint_named_from_outside_its_state_files_directory_is_reported(tmp_path, absolute) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    prefix = tp.Checkpoint(v=tp.Variable(np.ones(2, np.float32))).save(str(elsewhere / "x"))
    home = tmp_path / "run"
    _state_file(home, prefix if absolute else "../elsewhere/x-1")
    status = tp.Checkpoint(v=tp.Variable(np.zeros(2, np.float32))).restore(str(home))
    expected = f"the checkpoint was read from {os.path.realpath(prefix)}, outside {home} whose state file named it"
    assert status.report().notes == (expected,)
    assert status.report().complete  # a note, not a problem


def test_a_checkpoint_beside_its_state_file_or_named_directly_has_no_note(tmp_path) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(np.ones(2, np.float32)))
    prefix = ckpt.save(str(tmp_path / "ckpt"))
    assert ckpt.restore(str(tmp_path)).report().notes == ()
    assert ckpt.restore(prefix).report().notes == ()
    link = tmp_path.parent / f"{tmp_path.name}-link"
    link.symlink_to(tmp_path)
    assert ckpt.restore(str(link)).report().notes == ()  # the same directory under another name


def test_restore_listed_notes_a_prefix_outside_the_listing_directory(tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ckpt = tp.Checkpoint(v=tp.Variable(np.ones(2, np.float32)))
    prefix = ckpt.write(str(elsewhere / "x"))
    home = tmp_path / "run"
    home.mkdir()
    status = ckpt._restore_listed(prefix, str(home))
    assert status.report().notes == (
        f"the checkpoint was read from {os.path.realpath(prefix)}, outside {home} whose state file named it",
    )
    assert ckpt._restore_listed(prefix, str(elsewhere)).report().notes == ()
