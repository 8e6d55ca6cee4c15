"""Which checkpoint a PATH means, and which tensor ``--tensor NAME`` means."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EXAMPLES
from trackpoint.cli import main

MODEL = str(EXAMPLES / "tf_model")
KERNEL_KEY = "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.fixture
def run(tmp_path) -> str:
    """A directory holding ckpt-1 (the example model), ckpt-2 and ckpt-10."""
    shutil.copytree(EXAMPLES / "tf_model", tmp_path / "run")
    for number in (2, 10):
        tp.save_tensors(str(tmp_path / "run" / f"ckpt-{number}"), {"w": np.zeros(2)})
    return str(tmp_path / "run")


# -- PATH ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "tree", "verify"])
@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
def test_a_checkpoint_file_means_its_prefix(capsys, run: str, command: str, suffix: str) -> None:
    assert main([command, f"{run}/ckpt-1"]) == 0
    expected = capsys.readouterr()
    assert main([command, f"{run}/ckpt-1{suffix}"]) == 0
    assert capsys.readouterr() == expected


def test_diff_takes_checkpoint_files_too(capsys, run: str) -> None:
    assert main(["diff", f"{run}/ckpt-1.index", f"{run}/ckpt-1.data-00000-of-00001"]) == 0
    assert "equal" in capsys.readouterr().out


def test_a_missing_prefix_lists_the_checkpoints_that_exist(capsys, run: str) -> None:
    assert main(["inspect", f"{run}/ckp"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"trackpoint inspect: no checkpoint at {run}/ckp; checkpoints in {run}/: ckpt-1, ckpt-2, ckpt-10 "
        f"(pass one as {run}/ckpt-10)\n"
    )
    assert main(["verify", f"{run}/ckpt-3.index"]) == 1
    err = capsys.readouterr().err
    assert "ckpt-1, ckpt-2, ckpt-10" in err and "did you mean" not in err and ".index-1" not in err


def test_a_directory_without_a_state_file_lists_its_checkpoints(capsys, run: str) -> None:
    os.unlink(os.path.join(run, "checkpoint"))
    assert main(["tree", run]) == 1
    assert capsys.readouterr().err == (
        f"trackpoint tree: {run} has no 'checkpoint' state file; checkpoints in "
        f"{run}/: ckpt-1, ckpt-2, ckpt-10 (pass one as {run}/ckpt-10)\n"
    )


def test_a_long_listing_is_cut_short(capsys, tmp_path) -> None:
    for number in range(1, 13):
        tp.save_tensors(str(tmp_path / f"ckpt-{number}"), {"w": np.zeros(1)})
    assert main(["inspect", str(tmp_path / "x")]) == 1
    assert (
        ": ckpt-1, ckpt-2, ckpt-3, ckpt-4, ckpt-5, ckpt-6, ckpt-7, ckpt-8, ckpt-9, ckpt-10, ... (12 in all) "
        f"(pass one as {tmp_path}/ckpt-12)" in capsys.readouterr().err
    )


def test_nothing_to_list(capsys, tmp_path) -> None:
    assert main(["inspect", str(tmp_path / "x")]) == 1
    assert capsys.readouterr().err.endswith(f"; {tmp_path}/ holds no checkpoint (no *.index file)\n")
    assert main(["inspect", str(tmp_path / "gone" / "x")]) == 1
    assert capsys.readouterr().err.endswith(f"; cannot list {tmp_path}/gone/: No such file or directory\n")


def _state_file(directory, prefix: str) -> None:
    (directory / "checkpoint").write_text(
        f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n'
    )


@pytest.mark.parametrize("spelling", ["absolute", "relative", "symlinked", "subdirectory"])
def test_a_state_file_naming_a_checkpoint_elsewhere_is_noted(capsys, tmp_path, spelling: str) -> None:
    elsewhere = tmp_path / "run" / "sub" if spelling == "subdirectory" else tmp_path / "elsewhere"
    tp.save_tensors(str(elsewhere / "ckpt-1"), {"w": np.zeros(1)})
    (tmp_path / "run").mkdir(exist_ok=True)
    if spelling == "symlinked":
        os.symlink(elsewhere, tmp_path / "run" / "sub")
    named = {"absolute": str(elsewhere / "ckpt-1"), "relative": "../elsewhere/ckpt-1"}.get(spelling, "sub/ckpt-1")
    _state_file(tmp_path / "run", named)
    assert main(["inspect", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().err == (
        f"note: the state file in {tmp_path / 'run'} names a checkpoint outside it: "
        f"{os.path.realpath(elsewhere)}/ckpt-1\n"
    )


def test_a_checkpoint_beside_its_state_file_needs_no_note(capsys, tmp_path) -> None:
    tp.save_tensors(str(tmp_path / "run" / "ckpt-1"), {"w": np.zeros(1)})
    _state_file(tmp_path / "run", str(tmp_path / "run" / "ckpt-1"))
    os.symlink(tmp_path / "run", tmp_path / "link")  # the same directory under another name
    assert main(["inspect", str(tmp_path / "run")]) == 0
    assert main(["inspect", str(tmp_path / "link")]) == 0
    assert main(["verify", MODEL]) == 0
    assert capsys.readouterr().err == ""


# -- --tensor NAME --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["model.dense.kernel", "(root).model.dense.kernel", "model/dense/kernel"])
def test_a_tensor_by_its_object_path(capsys, name: str) -> None:
    assert main(["inspect", MODEL, "--tensor", KERNEL_KEY]) == 0
    expected = capsys.readouterr().out
    assert main(["inspect", MODEL, "--tensor", name]) == 0
    assert capsys.readouterr().out == expected
    assert main(["inspect", MODEL, "--tensor", name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tensors"][0]["key"] == KERNEL_KEY


def test_an_ambiguous_object_path_lists_the_keys(capsys, tmp_path) -> None:
    model = tp.Module()
    setattr(model, "a.b", tp.Variable(1.0))  # its path is (root).model.a.b, as is model.a's child b
    model.a = tp.Module()
    model.a.b = tp.Variable(2.0)
    prefix = tp.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    assert main(["inspect", prefix, "--tensor", "model.a.b"]) == 1
    assert capsys.readouterr().err == (
        f"trackpoint inspect: 'model.a.b' names 2 tensors in {prefix}: model/a..b/.ATTRIBUTES/VARIABLE_VALUE, "
        "model/a/b/.ATTRIBUTES/VARIABLE_VALUE; pass one of these keys\n"
    )
    assert main(["inspect", prefix, "--tensor", "model/a/b"]) == 0


def test_an_unknown_tensor_offers_close_names(capsys) -> None:
    assert main(["inspect", MODEL, "--tensor", "kernel"]) == 1
    assert capsys.readouterr().err.endswith("; close names: model.dense.kernel\n")
    assert main(["inspect", MODEL, "--tensor", "model.dense.kernal"]) == 1
    assert "; close names: model.dense.kernel" in capsys.readouterr().err
