"""The exception tree, and bad arguments at the public API raising its classes."""

from __future__ import annotations

import copy
import errno
import pathlib
import pickle

import numpy as np
import pytest

import trackpoint as tp

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _documentation() -> str:
    """The user's documentation: the guides and pages of docs/ (the README is their front page)."""
    return "\n".join(page.read_text() for page in sorted((ROOT / "docs").rglob("*.md")))


def test_permission_denied_is_a_leaf_of_the_tree() -> None:
    error = tp.errors.PermissionDeniedError
    assert issubclass(error, tp.errors.CheckpointError) and issubclass(error, PermissionError)
    assert "PermissionDeniedError" in tp.errors.__all__
    assert tp.errors.__all__ == sorted(tp.errors.__all__)
    assert "PermissionDeniedError(CheckpointError, PermissionError)" in (tp.errors.__doc__ or "")
    assert str(error("/x/ckpt.index: permission denied")) == "/x/ckpt.index: permission denied"
    assert "PermissionDeniedError" in _documentation()


def test_unavailable_is_a_leaf_of_the_tree() -> None:
    error = tp.errors.UnavailableError
    assert issubclass(error, tp.errors.CheckpointError) and issubclass(error, ConnectionError)
    assert "UnavailableError" in tp.errors.__all__
    assert "UnavailableError(CheckpointError, ConnectionError)" in (tp.errors.__doc__ or "")
    assert "UnavailableError" in _documentation()


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


# -- what every error carries ---------------------------------------------------------------

_ALL_ERRORS = [getattr(tp.errors, name) for name in tp.errors.__all__]


@pytest.mark.parametrize("error", _ALL_ERRORS, ids=lambda e: e.__name__)
def test_path_and_key_are_optional_keyword_attributes(error: type[tp.errors.CheckpointError]) -> None:
    plain = error("run/ckpt-1.index: damaged")  # every call in the library passes only a message
    assert plain.path is None and plain.key is None
    assert str(plain) == "run/ckpt-1.index: damaged" and plain.args == ("run/ckpt-1.index: damaged",)
    detailed = error("run/ckpt-1.index: damaged", path="run/ckpt-1.index", key="model/w")
    assert (detailed.path, detailed.key) == ("run/ckpt-1.index", "model/w")
    assert str(detailed) == "run/ckpt-1.index: damaged"  # the attributes do not change the message
    assert error("message", "run/ckpt-1.index").path is None  # keyword-only: positionals stay the builtin's
    with pytest.raises(TypeError):
        error("message", line=3)  # type: ignore[call-arg]


@pytest.mark.parametrize("error", _ALL_ERRORS, ids=lambda e: e.__name__)
@pytest.mark.parametrize(
    "duplicate", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy, copy.deepcopy], ids=["pickle", "copy", "deepcopy"]
)
def test_errors_survive_pickling_and_copying_with_their_attributes(error, duplicate) -> None:
    """An error raised in a worker process reaches its parent (multiprocessing pickles it) whole."""
    original = error("key 'w' not found", path="/ckpt/model-3", key="w")
    clone = duplicate(original)
    assert type(clone) is error
    assert (clone.args, str(clone), clone.path, clone.key) == (original.args, str(original), "/ckpt/model-3", "w")
    assert duplicate(error("bare")).path is None


def test_os_error_leaves_keep_the_errno_form_of_their_builtin() -> None:
    error = tp.errors.WriteError(errno.ENOSPC, "No space left on device", path="/full/ckpt")
    assert error.errno == errno.ENOSPC and error.strerror == "No space left on device"
    assert str(error) == "[Errno 28] No space left on device" and error.path == "/full/ckpt"
    assert error.filename is None  # path is not OSError.filename, which would change the message


def test_data_loss_is_an_os_error_and_the_docstring_says_what_that_means() -> None:
    doc = tp.errors.__doc__ or ""
    assert "DataLossError(CheckpointError, OSError)" in doc  # not the IOError alias
    leaves = [name for name in tp.errors.__all__ if issubclass(getattr(tp.errors, name), OSError)]
    assert sorted(leaves) == [
        "CoordinationError",
        "DataLossError",
        "DeadlineExceededError",
        "NotFoundError",
        "PermissionDeniedError",
        "UnavailableError",
        "WriteError",
    ]
    assert issubclass(tp.errors.CoordinationError, tp.errors.WriteError)  # a failed save, seen from another rank
    assert "Six leaves are ``OSError`` subclasses" in doc and "``except OSError``" in doc
    assert "catches a\nchecksum failure" in doc or "catches a checksum failure" in " ".join(doc.split())
    with pytest.raises(OSError):
        raise tp.errors.DataLossError("ckpt.data-00000-of-00001: checksum mismatch")


def test_a_real_failure_is_caught_by_its_builtin_and_by_the_tree(tmp_path) -> None:
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.arange(4, dtype=np.float32)})
    data = tmp_path / "ckpt.data-00000-of-00001"
    data.write_bytes(bytes(len(data.read_bytes())))
    with tp.load_checkpoint(prefix) as reader, pytest.raises(OSError) as caught:
        reader.get_tensor("w")
    assert isinstance(caught.value, tp.errors.DataLossError) and "w" in str(caught.value)
