"""Where TF's users match an error message, trackpoint's message holds TF's phrase (checked against TF 2.21)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import trackpoint as tp

PHRASE = "incompatible tensor with shape"


def test_a_shape_mismatch_on_restore_carries_tfs_phrase(tmp_path) -> None:
    theirs = tf.train.Checkpoint(v=tf.Variable(np.zeros(3, np.float32))).write(str(tmp_path / "tf"))
    with pytest.raises(ValueError, match=PHRASE):  # TF's own wording, so the pin below pins the right words
        tf.train.Checkpoint(v=tf.Variable(np.zeros(2, np.float32))).read(theirs)
    for path in (theirs, tp.Checkpoint(v=tp.Variable(np.zeros(3, np.float32))).write(str(tmp_path / "tp"))):
        with pytest.raises(tp.errors.InvalidArgumentError, match=PHRASE + r" \[3\]") as caught:
            tp.Checkpoint(v=tp.Variable(np.zeros(2, np.float32))).read(path)
        assert "float32[2]" in str(caught.value) and "(root).v" in str(caught.value)
