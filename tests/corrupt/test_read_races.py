"""A checkpoint deleted or replaced while it is being read: a clear error that says so.

The remedy is to read (or restore) again; advice to copy files, right for a checkpoint that
was never complete, would send the user the wrong way.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import trackpoint as tp
import trackpoint._graph.restore
from trackpoint._format.bundle_reader import BundleReader

KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def _save(prefix: pathlib.Path, value: float) -> str:
    model = tp.Module()
    model.w = tp.Variable(np.full(4, value, np.float32))
    model.v = tp.Variable(np.full(2, value, np.float64))
    return tp.Checkpoint(model=model).write(str(prefix))


def _assert_says_read_again(error: BaseException) -> None:
    message = str(error)
    assert "deleted or replaced while being read" in message, message
    assert "again" in message, message
    assert "copy" not in message, message


def _delete(prefix: str) -> None:
    directory, name = os.path.split(prefix)
    for file in os.listdir(directory):
        if file.startswith(name + "."):
            os.remove(os.path.join(directory, file))


def test_a_checkpoint_deleted_after_its_index_was_read(tmp_path) -> None:
    prefix = _save(tmp_path / "ckpt", 1.0)
    with tp.load_checkpoint(prefix) as reader:
        _delete(prefix)
        with pytest.raises(tp.errors.NotFoundError) as caught:
            reader.get_tensor(KEY)
    _assert_says_read_again(caught.value)
    assert prefix + ".data-00000-of-00001" in str(caught.value) and KEY in str(caught.value)


def test_a_checkpoint_replaced_after_its_index_was_read(tmp_path) -> None:
    prefix = _save(tmp_path / "ckpt", 1.0)
    with tp.load_checkpoint(prefix) as reader:
        _save(tmp_path / "other", 2.0)
        for file in sorted(tmp_path.glob("other.*"), key=lambda f: f.suffix == ".index"):
            os.replace(file, prefix + file.name[len("other") :])
        with pytest.raises(tp.errors.DataLossError) as caught:
            reader.get_tensor(KEY)
    _assert_says_read_again(caught.value)


def test_a_restore_racing_a_deletion_between_index_and_data(tmp_path, monkeypatch) -> None:
    prefix = _save(tmp_path / "ckpt", 1.0)

    class DeletedOnceOpened(BundleReader):
        def __init__(self, path: str, *args: object, **kwargs: object) -> None:
            super().__init__(path, *args, **kwargs)  # type: ignore[arg-type]
            _delete(path)  # as another process would, right after the index was read

    monkeypatch.setattr(trackpoint._graph.restore, "BundleReader", DeletedOnceOpened)
    with pytest.raises(tp.errors.NotFoundError) as caught:
        tp.Checkpoint(model=tp.Module()).restore(prefix)
    _assert_says_read_again(caught.value)


def test_a_checkpoint_deleted_before_a_pending_value_is_read(tmp_path) -> None:
    prefix = _save(tmp_path / "ckpt", 1.0)
    model = tp.Module()
    tp.Checkpoint(model=model).read(prefix).expect_partial()
    _delete(prefix)
    with pytest.raises(tp.errors.NotFoundError) as caught:
        model.w = tp.Variable(np.zeros(4, np.float32))  # restore-on-create reads now
    _assert_says_read_again(caught.value)
    assert "restore again" in str(caught.value)


def test_a_checkpoint_replaced_before_a_pending_value_is_read(tmp_path) -> None:
    prefix = _save(tmp_path / "ckpt", 1.0)
    model = tp.Module()
    tp.Checkpoint(model=model).read(prefix).expect_partial()
    _save(tmp_path / "other", 2.0)
    for file in sorted(tmp_path.glob("other.*"), key=lambda f: f.suffix == ".index"):
        os.replace(file, prefix + file.name[len("other") :])
    with pytest.raises(tp.errors.DataLossError) as caught:
        model.w = tp.Variable(np.zeros(4, np.float32))
    _assert_says_read_again(caught.value)
    assert "restore again" in str(caught.value)


def test_a_checkpoint_missing_a_shard_from_the_start_still_says_it_is_incomplete(tmp_path) -> None:
    prefix = _save(tmp_path / "ckpt", 1.0)
    os.remove(prefix + ".data-00000-of-00001")  # before anything read it: never complete here
    with pytest.raises(tp.errors.NotFoundError, match=r"incomplete: copy every '\.data-\*' file"):
        tp.load_checkpoint(prefix).get_tensor(KEY)
