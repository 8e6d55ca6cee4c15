"""JSON read from files and arguments by the tools and the CLI, nested beyond ``MAX_JSON_DEPTH``:
refused with an error naming the file (or the option), never ``RecursionError``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import trackpoint as tp
from tests.helpers import EXAMPLES
from trackpoint.cli import main
from trackpoint.tools._embedded_graph import STRINGS_FIELD

_HOSTILE = ["[" * 100_000, '{"a": ' * 100_000, '{"k": {"shape": [], "values": ' + "[" * 100_000 + "}}"]


@pytest.mark.parametrize("hostile", _HOSTILE, ids=["arrays", "objects", "inside-a-valid-start"])
def test_hostile_string_tensors_in_safetensors_metadata_are_data_loss_naming_the_file(tmp_path, hostile) -> None:
    model = tp.Module()
    model.w = tp.Variable(np.arange(4, dtype=np.float32))
    model.tag = tp.Variable(b"run")
    prefix = tp.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    out = tmp_path / "hf"
    tp.convert(prefix, str(out), include_graph=True)
    path = str(out / "model.safetensors")
    with safe_open(path, "np") as f:
        metadata = dict(f.metadata())
    metadata[STRINGS_FIELD] = hostile
    save_file(load_file(path), path, metadata=metadata)
    with pytest.raises(tp.errors.DataLossError, match="128 levels deep") as caught:
        tp.convert(str(out), str(tmp_path / "back" / "ckpt"))
    assert caught.value.path == path and path in str(caught.value)
    assert not (tmp_path / "back").exists()


@pytest.mark.slow  # the CLI in a child process: seconds
def test_a_deep_value_given_to_rewrite_add_is_one_line(tmp_path) -> None:
    src = tp.save_tensors(str(tmp_path / "src"), {"a": np.zeros(1)})
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trackpoint",
            "rewrite",
            src,
            str(tmp_path / "dst"),
            "--add",
            "x=float32:" + "[" * 100_000,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "128 levels deep" in result.stderr
    assert not (tmp_path / "dst.index").exists()


def test_a_deep_storage_option_is_taken_as_text_not_a_traceback(capsys) -> None:
    # Not JSON trackpoint would parse: taken as text, as any value that is not JSON (then refused,
    # as every storage option is, beside a local path).
    status = main(["--storage-option", "k=" + "[" * 100_000, "inspect", str(EXAMPLES / "tf_model")])
    assert status == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
