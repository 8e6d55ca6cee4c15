"""TensorFlow 2.21 and in-place overwrites: what it reads at each stage, and its window."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import kill_inside_the_window, overwrite_checkpoint, shard_options
from tests.interop.tf_process import TFError, tf_side

pytestmark = pytest.mark.interop

_tf_read = tf_side("overwrite").read  # a module of six float32[256] variables reads the prefix: its values


@pytest.mark.parametrize(("first", "second"), [(6, 6), (6, 1), (1, 6)])
def test_tensorflow_reads_each_overwrite(tmp_path, first: int, second: int) -> None:
    prefix = str(tmp_path / "weights")
    ckpt, model = overwrite_checkpoint(1.0)
    ckpt.write(prefix, shard_options(first))
    assert _tf_read(prefix) == {1.0}
    for var in model.vs:
        var.assign(np.full(256, 2.0, np.float32))
    ckpt.write(prefix, shard_options(second))
    assert _tf_read(prefix) == {2.0}


def test_inside_the_window_tensorflow_refuses_the_files_and_reads_them_after_the_repair(tmp_path) -> None:
    prefix = str(tmp_path / "weights")
    kill_inside_the_window(prefix)
    with pytest.raises(TFError) as raised:  # a checksum error, never a wrong value
        _tf_read(prefix)
    assert raised.value.is_a("DataLossError")
    assert tp.repair_checkpoint(prefix) is True
    assert _tf_read(prefix) == {1.0}


def test_killed_after_keeping_the_previous_version_but_before_a_data_rename_tensorflow_reads_it(tmp_path) -> None:
    prefix = str(tmp_path / "weights")
    kill_inside_the_window(prefix, at=".data-00000-of-00006")
    assert _tf_read(prefix) == {1.0}
