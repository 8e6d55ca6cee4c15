"""``trackpoint tree``, ``diff`` and ``verify``: output and exit codes."""

from __future__ import annotations

import io
import json
import os
import pathlib
import shutil

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EXAMPLES, GOLDEN
from trackpoint.cli import main
from trackpoint.cli._output import Progress


def _checkpoint(tmp_path, name: str, scale: float = 1.0) -> str:
    model = tp.Module()
    model.w = tp.Variable(np.arange(6, dtype=np.float32) * scale)
    model.tag = tp.Variable(b"run")
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.ones(6, np.float32), model.w)])
    return tp.Checkpoint(model=model, optimizer=adam).write(str(tmp_path / name))


def test_inspect_lists_object_paths(capsys) -> None:
    assert main(["inspect", str(EXAMPLES / "tf_model")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["key", "dtype", "shape", "object"]
    assert any(line.split()[-1] == "(root).model.dense.kernel" for line in lines)


def test_tree(capsys, tmp_path) -> None:
    assert main(["tree", _checkpoint(tmp_path, "a")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("(root)\n  model\n    w  float32[6]  24 B\n      [slot 'm' of optimizer]")


def test_tree_of_a_plain_bundle_fails_with_one_line(capsys) -> None:
    assert main(["tree", str(GOLDEN / "dtypes" / "plain")]) == 1
    err = capsys.readouterr().err
    assert "object-based" in err and err.count("\n") == 1


def test_diff_exit_codes_and_summary(capsys, tmp_path) -> None:
    a, same, b = _checkpoint(tmp_path, "a"), _checkpoint(tmp_path, "same"), _checkpoint(tmp_path, "b", 1.5)
    assert main(["diff", a, same]) == 0
    assert "equal" in capsys.readouterr().out
    assert main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert "~ (root).model.w [VARIABLE_VALUE] value: 5 of 6 elements differ (max |diff| 2.5)" in out
    assert main(["diff", a, b, "--atol", "3"]) == 0
    capsys.readouterr()
    assert main(["diff", a, b, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["equal"] is False and doc["changed"][0]["max_abs_diff"] == 2.5
    assert main(["diff", a, str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def test_verify_good_checkpoint(capsys) -> None:
    assert main(["verify", str(GOLDEN / "sharded" / "ckpt")]) == 0
    assert capsys.readouterr().out.startswith("OK: 6 tensors")


def test_verify_reports_every_damaged_key(capsys, tmp_path) -> None:
    shutil.copytree(GOLDEN / "sharded", tmp_path / "s")
    prefix = str(tmp_path / "s" / "ckpt")
    for shard in (0, 13):  # a slice of "big" and the file holding "text"
        path = f"{prefix}.data-{shard:05d}-of-00014"
        raw = bytearray(pathlib.Path(path).read_bytes())
        raw[1] ^= 0xFF
        pathlib.Path(path).write_bytes(bytes(raw))
    os.unlink(f"{prefix}.data-00004-of-00014")  # a slice of "wide"
    assert main(["verify", prefix]) == 1
    out = capsys.readouterr().out
    damaged = [line.split(":")[0] for line in out.splitlines() if line.startswith("DAMAGED")]
    assert len(damaged) == 3
    assert {d.split()[1].split("/")[0] for d in damaged} == {"big", "text", "wide"}
    assert out.splitlines()[-1].startswith("3 problem(s)")


def test_verify_reports_a_damaged_index_block_and_continues(capsys, tmp_path) -> None:
    shutil.copytree(GOLDEN / "many", tmp_path / "m")
    index = tmp_path / "m" / "plain.index"
    raw = bytearray(index.read_bytes())
    raw[300_000] ^= 0xFF  # inside the second data block (the first holds the header)
    index.write_bytes(bytes(raw))
    assert main(["verify", str(tmp_path / "m" / "plain")]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED (index)" in out and "block checksum mismatch" in out
    assert out.count("DAMAGED") == 1  # the keys of the other blocks were all read and verified


def test_verify_missing_checkpoint_exits_1(capsys, tmp_path) -> None:
    assert main(["verify", str(tmp_path / "none")]) == 1
    assert "Traceback" not in capsys.readouterr().err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream, shown", [(_Tty(), True), (io.StringIO(), False)])
def test_progress_bar_only_on_a_terminal(stream, shown: bool) -> None:
    bar = Progress("verify", stream)
    bar(50, 100)
    bar.close()
    assert ("50%" in stream.getvalue()) is shown
