"""A variable made from a big-endian array is a float32 like any other: it restores, saves
little-endian bytes (which TensorFlow reads) and takes big-endian values."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from tests.interop.tf_process import tf_side


def test_a_big_endian_variable_restores_saves_little_endian_and_assigns(tmp_path) -> None:
    source = tp.Variable(np.arange(3, dtype=">f4"))
    assert source.dtype == np.dtype(np.float32)
    path = tp.Checkpoint(v=source).write(str(tmp_path / "ckpt"))
    stored = tp.load_checkpoint(path).get_tensor("v/.ATTRIBUTES/VARIABLE_VALUE")
    assert stored.dtype == np.dtype("<f4") and stored.tolist() == [0.0, 1.0, 2.0]
    with open(f"{path}.data-00000-of-00001", "rb") as f:
        assert np.arange(3, dtype="<f4").tobytes() in f.read()
    target = tp.Variable(np.zeros(3, dtype=">f4"))
    tp.Checkpoint(v=target).read(path).assert_consumed()
    assert target.numpy().tolist() == [0.0, 1.0, 2.0]
    target.assign(np.array([5, 6, 7], ">f4"))
    assert target.numpy().tolist() == [5.0, 6.0, 7.0]
    target.assign_add(np.array([1, 1, 1], ">f4"))
    assert target.numpy().tolist() == [6.0, 7.0, 8.0]
    assert tp.Variable(np.arange(2, dtype=">i8"), dtype=">i8").dtype == np.dtype(np.int64)


@pytest.mark.interop
def test_tensorflow_reads_a_big_endian_variable_saved_by_trackpoint(tmp_path) -> None:
    path = tp.Checkpoint(v=tp.Variable(np.arange(3, dtype=">f4"))).write(str(tmp_path / "ckpt"))
    # A float32[3] tf.Variable of zeros reads it with assert_consumed(), in the TensorFlow child.
    values = tf_side("files").read_into_zeros(path, {"v": ([3], "float32")})
    assert values["v"].tolist() == [0.0, 1.0, 2.0]
