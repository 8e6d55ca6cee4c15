"""A checkpoint prefix that ends in a separator: TF1's ``Saver`` given ``model/`` writes
``model/.index`` and ``model/.data-00000-of-00001`` (one of the real-world checkpoints is such).
The readers take ``model/`` as that prefix when its index exists and no state file names another."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import trackpoint as tp

REAL = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real" / "tf1-crko-bnn-dirprefix"


def _dir_prefix(tmp_path: pathlib.Path) -> str:
    written = tp.save_tensors(str(tmp_path / "w"), {"Variable": np.arange(6, dtype=np.float32).reshape(2, 3)})
    (tmp_path / "model").mkdir()
    for suffix in (".index", ".data-00000-of-00001"):
        os.replace(written + suffix, tmp_path / "model" / suffix)
    return str(tmp_path / "model") + os.sep


def test_the_readers_take_a_directory_holding_dot_index_as_its_prefix(tmp_path) -> None:
    prefix = _dir_prefix(tmp_path)
    assert tp.list_variables(prefix) == [("Variable", [2, 3])]
    np.testing.assert_array_equal(tp.load_variable(prefix, "Variable"), np.arange(6).reshape(2, 3))
    with tp.load_checkpoint(prefix) as reader:
        assert reader.prefix == prefix and reader.has_tensor("Variable")
    assert tp.verify_checkpoint(prefix) == []


def test_a_state_file_in_that_directory_still_names_the_checkpoint(tmp_path) -> None:
    prefix = _dir_prefix(tmp_path)
    other = tp.save_tensors(prefix + "ckpt-1", {"other": np.zeros(1)})
    (pathlib.Path(prefix) / "checkpoint").write_text(f'model_checkpoint_path: "{other}"\n')
    assert tp.list_variables(prefix) == [("other", [1])]


def test_a_directory_without_either_is_still_not_found(tmp_path) -> None:
    with pytest.raises(tp.errors.NotFoundError, match="Couldn't find 'checkpoint' file"):
        tp.list_variables(str(tmp_path) + os.sep)
    (tmp_path / "model").mkdir()
    with pytest.raises(tp.errors.NotFoundError, match="Couldn't find 'checkpoint' file"):
        tp.list_variables(str(tmp_path / "model"))  # no separator: a directory, as TensorFlow takes it


@pytest.mark.skipif(not REAL.is_dir(), reason=f"the real-world checkpoints are not at {REAL.parent}")
def test_the_real_checkpoint_saved_under_a_separator_prefix_reads() -> None:
    prefix = str(REAL / "model") + os.sep
    names = dict(tp.list_variables(prefix))
    assert names == {"Variable": [784, 10], "Variable_1": [10]}
    assert tp.load_variable(prefix, "Variable").shape == (784, 10) and tp.verify_checkpoint(prefix) == []
