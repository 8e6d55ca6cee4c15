"""``trackpoint demo --dir DIR`` writes only where it cannot destroy anyone's checkpoints."""

from __future__ import annotations

import os

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.cli import main


def _snapshot(directory) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def _users_run(directory) -> None:
    """What a user's training job leaves: a CheckpointManager's files, named as the demo names its own."""
    ckpt = tp.Checkpoint(w=tp.Variable(np.ones(3, np.float32)))
    manager = tp.CheckpointManager(ckpt, str(directory), max_to_keep=10)
    for _ in range(5):
        manager.save()


@pytest.mark.parametrize("extra", [None, "notes.txt"])
def test_a_directory_of_someone_elses_checkpoints_is_refused(capsys, tmp_path, extra: str | None) -> None:
    _users_run(tmp_path)
    if extra:
        (tmp_path / extra).write_text("mine")
    before = _snapshot(tmp_path)
    assert main(["demo", "--dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"trackpoint demo: refusing to use {tmp_path}: it holds files the demo did not "
        "write (checkpoint, ckpt-1.data-00000-of-00001, ckpt-1.index, ... ("
    )
    assert "pass a new or empty directory with --dir, or leave --dir out" in captured.err
    assert _snapshot(tmp_path) == before


def test_an_earlier_demo_directory_with_a_file_added_is_refused(capsys, tmp_path) -> None:
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    (tmp_path / "ckpt-99.index.bak").write_text("mine")
    before = _snapshot(tmp_path)
    capsys.readouterr()
    assert main(["demo", "--dir", str(tmp_path)]) == 2
    assert "(ckpt-99.index.bak)" in capsys.readouterr().err
    assert _snapshot(tmp_path) == before


def test_a_file_is_refused(capsys, tmp_path) -> None:
    (tmp_path / "f").write_text("mine")
    assert main(["demo", "--dir", str(tmp_path / "f")]) == 2
    assert capsys.readouterr().err.startswith(f"trackpoint demo: {tmp_path / 'f'} is not a directory; ")
    assert (tmp_path / "f").read_text() == "mine"


def test_a_new_directory_and_an_earlier_demos_are_fine(capsys, tmp_path) -> None:
    directory = tmp_path / "new" / "demo"
    assert main(["demo", "--dir", str(directory)]) == 0
    first = capsys.readouterr().out
    assert main(["demo", "--dir", str(directory)]) == 0  # starts afresh: the same run, the same files
    assert capsys.readouterr().out == first
    assert sorted(os.listdir(directory)) == [".trackpoint-demo", "checkpoint"] + [
        f"ckpt-{n}.{kind}" for n in (4, 5, 6) for kind in ("data-00000-of-00001", "index")
    ]


def test_the_library_entry_point_refuses_too(tmp_path) -> None:
    from trackpoint.cli import _demo as demo

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(tp.errors.InvalidArgumentError, match="refusing to use"):
        demo.run(str(tmp_path), out=lambda line: None)
    assert os.listdir(tmp_path) == ["notes.txt"]
