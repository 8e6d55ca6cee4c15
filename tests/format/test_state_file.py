"""The ``checkpoint`` state file: relative and absolute paths, atomic replacement."""

from __future__ import annotations

import os

import pytest

import trackpoint as tp
from trackpoint._format.state_file import read_state, write_state


def test_relative_paths_are_made_absolute_and_absolute_kept(tmp_path) -> None:
    elsewhere = "/somewhere/else/ckpt-1"
    (tmp_path / "checkpoint").write_text(
        f'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "{elsewhere}"\n'
        'all_model_checkpoint_paths: "ckpt-2"\n'
    )
    state = tp.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == str(tmp_path / "ckpt-2")
    assert state.all_model_checkpoint_paths == (elsewhere, str(tmp_path / "ckpt-2"))
    assert state.all_model_checkpoint_timestamps == ()


def test_write_stores_paths_inside_the_directory_relative(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    os.mkdir("run")
    write_state("run", "run/ckpt-1")  # relative to the working directory, like TF users pass it
    assert (tmp_path / "run" / "checkpoint").read_text() == (
        'model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n'
    )
    write_state("run", "/abs/other/ckpt-7")
    assert read_state("run").model_checkpoint_path == "/abs/other/ckpt-7"
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoint"]  # no temp file left


def test_write_rejects_inconsistent_input(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="timestamps"):
        write_state(str(tmp_path), str(tmp_path / "a"), [], [1.0, 2.0])
    with pytest.raises(tp.errors.InvalidArgumentError, match="state file's own path"):
        write_state(str(tmp_path), str(tmp_path / "checkpoint"))
