"""Writing a fixed prefix again: a whole checkpoint is readable from it at every instant.

A save killed inside TensorFlow's window (data files renamed, index not yet) is simulated
exactly: a child process SIGKILLs itself at the index rename.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import kill_inside_the_window, overwrite_checkpoint, shard_options
from trackpoint._storage import previous
from trackpoint.cli import main


def _restored(prefix: str, count: int = 6) -> float:
    ckpt, model = overwrite_checkpoint(-1.0, count)
    ckpt.read(prefix).assert_consumed()
    values = {float(v) for var in model.vs for v in var.numpy()}
    assert len(values) == 1, f"{prefix} mixes versions: {values}"
    return values.pop()


def _files(directory) -> list[str]:
    return sorted(os.listdir(directory))


@pytest.mark.parametrize(("first", "second"), [(6, 1), (1, 6), (6, 3)])
def test_an_overwrite_with_another_shard_count_leaves_no_stale_data_files(tmp_path, first: int, second: int) -> None:
    prefix = str(tmp_path / "weights")
    ckpt, model = overwrite_checkpoint(1.0)
    ckpt.write(prefix, shard_options(first))
    for var in model.vs:
        var.assign(np.full(256, 2.0, np.float32))
    ckpt.write(prefix, shard_options(second))
    count = len([n for n in _files(tmp_path) if ".data-" in n])
    assert count == second and all(f"-of-{second:05d}" in n for n in _files(tmp_path) if ".data-" in n)
    assert _files(tmp_path) == sorted(
        ["weights.index"] + [f"weights.data-{i:05d}-of-{second:05d}" for i in range(second)]
    )
    assert _restored(prefix) == 2.0


def test_the_index_is_never_missing_while_a_prefix_is_overwritten(tmp_path, monkeypatch) -> None:
    prefix = str(tmp_path / "weights")
    ckpt, model = overwrite_checkpoint(1.0)
    ckpt.write(prefix, shard_options(6))
    seen = []
    real_replace, real_unlink = os.replace, os.unlink

    def check(name):
        def call(*args):
            result = (real_replace if name == "replace" else real_unlink)(*args)
            seen.append(name)
            assert os.path.exists(prefix + ".index"), f"no index after {name}{args}"
            return result

        return call

    monkeypatch.setattr(os, "replace", check("replace"))
    monkeypatch.setattr(os, "unlink", check("unlink"))
    for step in (2.0, 3.0):
        for var in model.vs:
            var.assign(np.full(256, step, np.float32))
        ckpt.write(prefix, shard_options(6))
    monkeypatch.undo()
    assert seen.count("replace") >= 14
    assert _restored(prefix) == 3.0 and _files(tmp_path) == sorted(
        ["weights.index"] + [f"weights.data-{i:05d}-of-00006" for i in range(6)]
    )


@pytest.mark.parametrize("repair_fails", [False, True])
def test_a_rename_failing_part_way_puts_the_previous_version_back(tmp_path, monkeypatch, repair_fails: bool) -> None:
    prefix = str(tmp_path / "weights")
    ckpt, model = overwrite_checkpoint(1.0)
    ckpt.write(prefix, shard_options(6))
    for var in model.vs:
        var.assign(np.full(256, 2.0, np.float32))
    real_replace = os.replace
    calls = []

    def fail_fourth(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 4 or (repair_fails and len(calls) > 4):
            raise OSError(5, "Input/output error", dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", fail_fourth)
    expected = (
        r"putting its previous version back failed .*The previous version is whole at .*weights\.tp-prev, "
        r"and trackpoint reads it .*TensorFlow cannot read"
        if repair_fails
        else r"Nothing of it was published; earlier checkpoints are untouched"
    )
    with pytest.raises(tp.errors.WriteError, match=expected):
        ckpt.write(prefix, shard_options(6))
    monkeypatch.undo()
    # Three data files had been replaced: put back, or read from the kept previous version.
    assert _restored(prefix) == 1.0
    assert previous.inspect(prefix).interrupted is repair_fails
    if repair_fails:
        assert previous.settle(prefix) is True
    assert not previous.inspect(prefix).previous and not [n for n in _files(tmp_path) if "tp-" in n]
    assert _restored(prefix) == 1.0


@pytest.mark.slow  # a child process killed inside the overwrite: seconds
def test_a_save_killed_inside_the_window_leaves_the_previous_version_readable(tmp_path) -> None:
    prefix = str(tmp_path / "weights")
    kill_inside_the_window(prefix)
    state = previous.inspect(prefix)
    assert state.interrupted and state.previous == prefix + ".tp-prev"
    # The prefix's own files mix versions (TensorFlow's window: its checksums refuse them)...
    mixed = [
        name
        for name in _files(tmp_path)
        if name.startswith("weights.data-")
        and (tmp_path / name).read_bytes() != (tmp_path / name.replace("weights", "weights.tp-prev")).read_bytes()
    ]
    assert mixed, "the child was killed before it replaced any data file"
    # ...and trackpoint reads the previous version, whole, in its place, changing nothing.
    before = {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)}
    assert _restored(prefix) == 1.0
    problems = tp.verify_checkpoint(prefix)  # the previous version is checked, and the state reported
    assert [p.key for p in problems] == [None] and "overwrite of this checkpoint was interrupted" in problems[0].message
    assert {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)} == before


@pytest.mark.slow  # a child process killed inside the overwrite: seconds
def test_trackpoint_verify_reports_an_interrupted_overwrite_and_repairs_it(tmp_path, capsys) -> None:
    prefix = str(tmp_path / "weights")
    kill_inside_the_window(prefix)
    assert main(["verify", prefix]) == 1
    out = capsys.readouterr().out
    assert "interrupted" in out and "TensorFlow cannot read" in out and "--repair" in out
    assert main(["verify", "--repair", prefix]) == 0
    out = capsys.readouterr().out
    assert out.startswith("REPAIRED") and "OK: " in out
    assert not previous.inspect(prefix).previous and _restored(prefix) == 1.0
    assert tp.repair_checkpoint(prefix) is False


@pytest.mark.slow  # a child process killed inside the overwrite: seconds
def test_the_next_save_repairs_an_interrupted_overwrite_before_it_writes(tmp_path, monkeypatch) -> None:
    prefix = str(tmp_path / "weights")
    kill_inside_the_window(prefix)
    # The next save fails before it publishes: the repair it began with stays.
    ckpt, _ = overwrite_checkpoint(3.0)
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(tp.errors.WriteError):
        ckpt.write(prefix, shard_options(6))
    monkeypatch.undo()
    state = previous.inspect(prefix)
    assert not state.interrupted and not state.previous and not state.leftovers
    assert _files(tmp_path) == sorted(["weights.index"] + [f"weights.data-{i:05d}-of-00006" for i in range(6)])
    assert _restored(prefix) == 1.0
    ckpt.write(prefix, shard_options(6))
    assert _restored(prefix) == 3.0


@pytest.mark.slow  # a child process killed inside the overwrite: seconds
def test_settle_restores_the_previous_version_and_reports_it(tmp_path) -> None:
    prefix = str(tmp_path / "weights")
    kill_inside_the_window(prefix)
    assert previous.settle(prefix) is True
    assert previous.settle(prefix) is False  # nothing left to do
    # (the killed writer's index temporary stays until the next save's cleanup)
    assert [n for n in _files(tmp_path) if ".tp-tmp-" not in n] == sorted(
        ["weights.index"] + [f"weights.data-{i:05d}-of-00006" for i in range(6)]
    )
    assert _restored(prefix) == 1.0


@pytest.mark.slow  # a child process (an interpreter start): seconds
def test_a_fifo_in_place_of_the_index_beside_a_kept_version_fails_at_once(tmp_path) -> None:
    prefix = str(tmp_path / "weights")
    ckpt, _ = overwrite_checkpoint(1.0)
    ckpt.write(prefix, shard_options(1))
    os.link(prefix + ".index", prefix + ".tp-prev.index")
    os.unlink(prefix + ".index")
    os.mkfifo(prefix + ".index")
    code = (
        f"import trackpoint as tp\ntry:\n    tp.load_checkpoint({prefix!r})\nexcept tp.errors.CheckpointError as e:\n"
        "    print(type(e).__name__, e)"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert child.stdout.startswith("InvalidArgumentError") and "not a regular file" in child.stdout, child.stderr


@pytest.mark.slow  # a child process killed inside the overwrite: seconds
def test_a_save_killed_before_it_replaced_a_data_file_leaves_the_prefix_whole(tmp_path) -> None:
    prefix = str(tmp_path / "weights")
    kill_inside_the_window(prefix, at=".data-00000-of-00006")  # the previous version is kept, nothing replaced
    state = previous.inspect(prefix)
    assert not state.interrupted and state.previous and prefix + ".tp-prev.index" in state.leftovers
    assert tp.verify_checkpoint(prefix) == [] and _restored(prefix) == 1.0
    assert tp.repair_checkpoint(prefix) is False  # nothing to put back; the kept copies go
    assert not previous.inspect(prefix).previous
    ckpt, _ = overwrite_checkpoint(3.0)
    ckpt.write(prefix, shard_options(6))
    assert [n for n in _files(tmp_path)] == sorted(
        ["weights.index"] + [f"weights.data-{i:05d}-of-00006" for i in range(6)]
    )
