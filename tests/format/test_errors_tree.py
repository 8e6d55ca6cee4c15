"""The exception tree, and bad arguments at the public API raising its classes."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import trackpoint as tp

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_permission_denied_is_a_leaf_of_the_tree() -> None:
    error = tp.errors.PermissionDeniedError
    assert issubclass(error, tp.errors.CheckpointError) and issubclass(error, PermissionError)
    assert "PermissionDeniedError" in tp.errors.__all__
    assert tp.errors.__all__ == sorted(tp.errors.__all__)
    assert "PermissionDeniedError(CheckpointError, PermissionError)" in (tp.errors.__doc__ or "")
    assert str(error("/x/ckpt.index: permission denied")) == "/x/ckpt.index: permission denied"
    assert "PermissionDeniedError" in README.read_text()


def test_every_name_in_the_tree_is_drawn_in_its_docstring() -> None:
    for name in tp.errors.__all__:
        assert f"{name}(" in (tp.errors.__doc__ or ""), name


@pytest.mark.parametrize("key", ["", b"w", 3, None, ("w",), "\ud800"])
def test_save_tensors_refuses_a_key_that_is_not_a_nonempty_str(tmp_path, key: object) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError) as caught:
        tp.save_tensors(str(tmp_path / "ckpt"), {key: np.zeros(2)})  # type: ignore[dict-item]
    message = str(caught.value)
    assert repr(key) in message, message
    assert "str" in message, message  # the remedy: what a key must be
    assert not list(tmp_path.iterdir())  # nothing was written


def test_save_tensors_says_how_to_fix_a_bytes_key(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"b'w'.*\.decode\(\)"):
        tp.save_tensors(str(tmp_path / "ckpt"), {b"w": np.zeros(2)})  # type: ignore[dict-item]


def test_save_tensors_refuses_what_is_not_a_mapping(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="mapping"):
        tp.save_tensors(str(tmp_path / "ckpt"), [("w", np.zeros(2))])  # type: ignore[arg-type]


def test_reader_names_may_be_str_or_bytes_and_nothing_else(tmp_path) -> None:
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.arange(2)})
    with tp.load_checkpoint(prefix) as reader:
        assert reader.has_tensor("w") and reader.has_tensor(b"w")  # TF takes bytes too
        assert reader.get_tensor(b"w").tolist() == [0, 1]
        for name in (3, None):
            with pytest.raises(tp.errors.InvalidArgumentError, match=repr(name)):
                reader.get_tensor(name)  # type: ignore[arg-type]
            with pytest.raises(tp.errors.InvalidArgumentError, match=repr(name)):
                reader.has_tensor(name)  # type: ignore[arg-type]
    with pytest.raises(tp.errors.InvalidArgumentError, match="3"):
        tp.load_variable(prefix, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [None, 3, b"\x00", "with\x00nul"])
def test_a_path_that_is_no_path_raises_invalid_argument(path: object) -> None:
    for operation in (tp.load_checkpoint, tp.verify_checkpoint, tp.list_variables):
        with pytest.raises(tp.errors.InvalidArgumentError):
            operation(path)  # type: ignore[arg-type]
    for directory_operation in (tp.latest_checkpoint, tp.get_checkpoint_state):
        with pytest.raises(tp.errors.InvalidArgumentError):
            directory_operation(path)  # type: ignore[arg-type]
    if path is not None:  # restore(None) is TF's "initialize only", not a mistake
        with pytest.raises(tp.errors.InvalidArgumentError):
            tp.Checkpoint().restore(path)  # type: ignore[arg-type]
