"""The errors a user meets carry the file and the key they are about as attributes."""

from __future__ import annotations

import os

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage import naming


def _model(w: np.ndarray) -> tp.Module:
    model = tp.Module()
    model.w = tp.Variable(w)
    return model


def _saved(tmp_path) -> str:
    return tp.Checkpoint(model=_model(np.arange(256, dtype=np.float32))).write(str(tmp_path / "ckpt"))


KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def test_a_missing_checkpoint_names_its_index(tmp_path) -> None:
    with pytest.raises(tp.errors.NotFoundError) as caught:
        tp.load_checkpoint(str(tmp_path / "nothing"))
    assert caught.value.path == naming.index_filename(str(tmp_path / "nothing"))
    assert caught.value.key is None


def test_a_missing_key_names_the_checkpoint_and_the_key(tmp_path) -> None:
    prefix = _saved(tmp_path)
    with tp.load_checkpoint(prefix) as reader, pytest.raises(tp.errors.NotFoundError) as caught:
        reader.get_tensor("model/nothing")
    assert (caught.value.path, caught.value.key) == (prefix, "model/nothing")


def test_a_damaged_value_names_its_data_file_and_key(tmp_path) -> None:
    prefix = _saved(tmp_path)
    data = naming.data_filename(prefix, 0, 1)
    with open(data, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with tp.load_checkpoint(prefix) as reader, pytest.raises(tp.errors.DataLossError) as caught:
        reader.get_tensor(KEY)
    assert (caught.value.path, caught.value.key) == (data, KEY)
    with pytest.raises(tp.errors.DataLossError) as caught:
        tp.Checkpoint(model=_model(np.zeros(256, np.float32))).read(prefix)
    assert (caught.value.path, caught.value.key) == (data, KEY)


def test_a_missing_data_file_names_it(tmp_path) -> None:
    prefix = _saved(tmp_path)
    os.remove(naming.data_filename(prefix, 0, 1))
    with tp.load_checkpoint(prefix) as reader, pytest.raises(tp.errors.NotFoundError) as caught:
        reader.get_tensor(KEY)
    assert (caught.value.path, caught.value.key) == (naming.data_filename(prefix, 0, 1), KEY)


def test_a_refused_restore_names_the_checkpoint_and_key(tmp_path) -> None:
    prefix = _saved(tmp_path)
    with pytest.raises(tp.errors.InvalidArgumentError) as caught:
        tp.Checkpoint(model=_model(np.zeros(3, np.float32))).read(prefix)
    assert (caught.value.path, caught.value.key) == (prefix, KEY)


def test_a_damaged_index_names_it(tmp_path) -> None:
    prefix = _saved(tmp_path)
    index = naming.index_filename(prefix)
    with open(index, "r+b") as f:
        f.truncate(10)
    with pytest.raises(tp.errors.DataLossError) as caught:
        tp.load_checkpoint(prefix)
    assert caught.value.path == index


def test_a_failed_save_names_its_prefix(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(tp.errors.WriteError) as caught:
        tp.Checkpoint(v=tp.Variable(1.0)).write(str(blocker / "ckpt"))
    assert caught.value.path == str(blocker / "ckpt")
