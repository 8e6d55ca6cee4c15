"""``trackpoint.compat``'s ``tf.io.gfile`` on an object store (moto's S3 server)."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.compat import tensorflow as tf

pytestmark = pytest.mark.slow


def test_gfile_and_the_readers_on_s3_urls(bucket, s3) -> None:
    prefix = tp.save_tensors(f"{bucket}/run/model.ckpt", {"w": np.arange(3.0)})
    gfile = tf.io.gfile
    assert gfile.exists(prefix + ".index") and not gfile.exists(f"{bucket}/run/none")
    assert gfile.isdir(f"{bucket}/run") and not gfile.isdir(prefix + ".index")
    assert sorted(gfile.listdir(f"{bucket}/run")) == ["model.ckpt.data-00000-of-00001", "model.ckpt.index"]
    assert gfile.glob(f"{bucket}/run/*.index") == [prefix + ".index"]
    with gfile.GFile(f"{bucket}/run/notes.txt", "w") as f:
        f.write("hello")
    with gfile.GFile(f"{bucket}/run/notes.txt") as f:
        assert f.read() == "hello"
    np.testing.assert_array_equal(tf.train.load_variable(prefix, "w"), np.arange(3.0))
