"""``trackpoint inspect``: listing, one tensor, all tensors, JSON, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import EXAMPLES, GOLDEN
from trackpoint.cli import main

MODEL = str(EXAMPLES / "tf_model")


def test_listing_is_a_table_with_the_total(capsys) -> None:
    assert main(["inspect", MODEL]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["key", "dtype", "shape", "object"]
    assert out[1].split() == ["_CHECKPOINTABLE_OBJECT_GRAPH", "string", "[]"]
    assert "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE  float32  [2,3]" in "\n".join(out)
    assert out[-1] == "# Total number of params: 17"


def test_one_tensor(capsys) -> None:
    assert main(["inspect", MODEL, "--tensor", "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tensor: model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE (float32) [2, 3]\n[[0. 1. 2.]")


def test_missing_tensor_exits_1(capsys) -> None:
    assert main(["inspect", MODEL, "--tensor", "xyzzy"]) == 1
    assert (
        capsys.readouterr().err == f"trackpoint inspect: no tensor 'xyzzy' in {MODEL}/ckpt-1; "
        f"'trackpoint inspect {MODEL}/ckpt-1' lists them\n"
    )
    assert main(["inspect", MODEL, "--tensor", "nope"]) == 1
    assert capsys.readouterr().err.endswith("; close names: note\n")


def test_all_tensors_json(capsys) -> None:
    assert main(["inspect", str(GOLDEN / "dtypes" / "plain"), "--all-tensors", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {row["key"]: row for row in doc["tensors"]}
    assert rows["string_vector"]["value"][1] == "a"
    assert rows["special_floats"]["value"][:3] == ["nan", "inf", "-inf"]
    assert rows["complex64"]["dtype"] == "complex64" and len(rows["complex64"]["value"][0][0]) == 2
    assert rows["bfloat16"]["shape"] == [2, 3, 4]
    assert doc["total_params"] == sum(
        1 if not r["shape"] else __import__("math").prod(r["shape"]) for r in doc["tensors"]
    )


@pytest.mark.slow  # the CLI in a child process: seconds
def test_damaged_checkpoint_exits_1_without_traceback(tmp_path) -> None:
    shutil.copytree(EXAMPLES / "tf_model", tmp_path / "m")
    data = tmp_path / "m" / "ckpt-1.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF
    data.write_bytes(bytes(raw))
    result = subprocess.run(
        [sys.executable, "-m", "trackpoint", "inspect", str(tmp_path / "m"), "--all-tensors"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "checksum mismatch" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [[], ["inspect"], ["inspect", "x", "--bogus"], ["frobnicate"]])
def test_bad_usage_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


@pytest.mark.slow  # the console script in a child process: seconds
def test_console_script_is_installed() -> None:
    script = shutil.which("trackpoint")
    assert script is not None and os.access(script, os.X_OK)
    result = subprocess.run([script, "inspect", MODEL], check=False, capture_output=True, text=True)
    assert result.returncode == 0 and "Total number of params: 17" in result.stdout


def test_demo_resumes_exactly(tmp_path, capsys) -> None:
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fresh objects restored from ckpt-3 at step 30" in out
    assert "optimizer slots included: True" in out
    assert "beta1_power  float32[]" in out
    assert sorted(os.listdir(tmp_path))[:2] == [".trackpoint-demo", "checkpoint"]


def test_a_damaged_object_graph_is_reported_not_hidden(tmp_path, capsys) -> None:
    import numpy as np

    import trackpoint as tp

    prefix = tp.Checkpoint(v=tp.Variable(np.arange(8, dtype=np.float32))).write(str(tmp_path / "ckpt"))
    data = tmp_path / "ckpt.data-00000-of-00001"
    data.write_bytes(bytes(len(data.read_bytes())))  # every checksum now fails, the graph's too
    assert main(["inspect", prefix]) == 1
    assert "checksum" in capsys.readouterr().err
