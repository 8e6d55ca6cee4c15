"""Keys, object names and paths that come from a checkpoint reach the terminal escaped.

A crafted key could otherwise return the cursor (``\\r``), erase the line (``\\x1b[2K``),
back up (``\\b``) or reverse the text (U+202E) and make a failing ``verify`` look like "OK".
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.cli import main

HOSTILE = "w\x1b[2K\rOK: 1 tensors, every checksum verified\u202e\b"
ESCAPED = "w\\x1b[2K\\rOK: 1 tensors, every checksum verified\\u202e\\x08"
VALUES = np.arange(4, dtype=np.float32) + 0.25


def _raw_controls(text: str) -> list[str]:
    return [ch for ch in text if not ch.isprintable() and ch != "\n"]


def _hostile(tmp_path, name: str = "ckpt", scale: float = 1.0, extra: bool = False) -> str:
    model = tp.Module()
    setattr(model, HOSTILE, tp.Variable(VALUES * scale))
    if extra:
        setattr(model, HOSTILE + "2", tp.Variable(np.zeros(2, np.float32)))
    return tp.Checkpoint(model=model).write(str(tmp_path / name))


def _damage(prefix: str) -> None:
    data = f"{prefix}.data-00000-of-00001"
    raw = bytearray(pathlib.Path(data).read_bytes())
    at = raw.index(VALUES.tobytes())  # the hostile key's own bytes
    raw[at] ^= 0xFF
    pathlib.Path(data).write_bytes(bytes(raw))


def test_a_failing_verify_cannot_pass_for_ok(capsys, tmp_path) -> None:
    prefix = _hostile(tmp_path)
    _damage(prefix)
    assert main(["verify", prefix]) == 1
    out = capsys.readouterr().out
    assert _raw_controls(out) == []
    assert f"DAMAGED model/{ESCAPED}/.ATTRIBUTES/VARIABLE_VALUE: " in out
    assert out.splitlines()[-1] == f"1 problem(s) in {prefix}"
    assert not any(line.startswith("OK") for line in out.splitlines())


def test_an_error_naming_a_hostile_key_is_escaped_on_stderr(capsys, tmp_path) -> None:
    prefix = _hostile(tmp_path)
    _damage(prefix)
    assert main(["inspect", prefix, "--all-tensors"]) == 1
    err = capsys.readouterr().err
    assert _raw_controls(err) == [] and ESCAPED in err and err.count("\n") == 1


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--all-tensors"], ["tree"]])
def test_listings_escape_keys_and_object_names(capsys, tmp_path, command: list[str]) -> None:
    prefix = _hostile(tmp_path)
    assert main([command[0], prefix, *command[1:]]) == 0
    out = capsys.readouterr().out
    assert _raw_controls(out) == [] and ESCAPED in out


def test_one_tensor_by_its_hostile_key_is_escaped(capsys, tmp_path) -> None:
    prefix = _hostile(tmp_path)
    assert main(["inspect", prefix, "--tensor", f"model/{HOSTILE}/.ATTRIBUTES/VARIABLE_VALUE"]) == 0
    out = capsys.readouterr().out
    assert _raw_controls(out) == [] and out.startswith(f"tensor: model/{ESCAPED}/.ATTRIBUTES/VARIABLE_VALUE")


def test_the_inspect_table_lines_up_as_printed(capsys, tmp_path) -> None:
    assert main(["inspect", _hostile(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        len(
            {
                line.index("dtype") if i == 0 else line.index("  float32") + 2
                for i, line in enumerate(lines)
                if i == 0 or "float32" in line
            }
        )
        == 1
    )


def test_diff_escapes_object_paths(capsys, tmp_path) -> None:
    a, b = _hostile(tmp_path, "a"), _hostile(tmp_path, "b", scale=2.0, extra=True)
    assert main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert _raw_controls(out) == []
    assert f"  + (root).model.{ESCAPED}2" in out and f"  ~ (root).model.{ESCAPED} [VARIABLE_VALUE]" in out


def test_json_holds_the_exact_names_with_nothing_raw(capsys, tmp_path) -> None:
    a, b = _hostile(tmp_path, "a"), _hostile(tmp_path, "b", scale=2.0)
    assert main(["inspect", a, "--json"]) == 0
    out = capsys.readouterr().out
    assert _raw_controls(out) == []
    assert f"model/{HOSTILE}/.ATTRIBUTES/VARIABLE_VALUE" in {row["key"] for row in json.loads(out)["tensors"]}
    assert main(["diff", a, b, "--json"]) == 1
    out = capsys.readouterr().out
    assert _raw_controls(out) == [] and json.loads(out)["changed"][0]["path"] == f"(root).model.{HOSTILE}"


def test_file_names_listed_in_a_not_found_message_are_escaped(capsys, tmp_path) -> None:
    tp.save_tensors(str(tmp_path / "x\x1b[2K\rckpt"), {"w": np.zeros(1)})
    assert main(["inspect", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert _raw_controls(err) == [] and "x\\x1b[2K\\rckpt" in err


def test_a_path_from_a_hostile_state_file_is_escaped(capsys, tmp_path) -> None:
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt\\033[2K\\rOK"\n')  # text-format escapes
    assert main(["verify", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert _raw_controls(err) == [] and "ckpt\\x1b[2K\\rOK" in err and err.count("\n") == 1


def test_a_line_break_in_a_name_cannot_fake_a_line_of_the_tree(tmp_path) -> None:
    root = tp.Module()
    setattr(root, "w\n  fake  float32[]  4 B", tp.Variable(1.0))
    root.real = tp.Variable(2.0)
    prefix = tp.Checkpoint(root).write(str(tmp_path / "ckpt"))
    lines = tp.CheckpointView(prefix).tree().split("\n")
    assert len(lines) == 3 and lines[0] == "(root)", lines  # the root and its two variables
    assert any(line.strip().startswith("w\\n  fake") for line in lines)
    assert not any(line.strip().startswith("fake") for line in lines)
