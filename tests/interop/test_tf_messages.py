"""Where TF's users match an error message, trackpoint's message holds TF's phrase (checked against TF 2.21)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import trackpoint as tp
from tests.interop.tf_process import TFError, tf_side

pytestmark = pytest.mark.interop

tf_files = tf_side("files")

PHRASE = "incompatible tensor with shape"


def test_a_shape_mismatch_on_restore_carries_tfs_phrase(tmp_path) -> None:
    theirs = tf_files.write_variables(str(tmp_path / "tf"), {"v": np.zeros(3, np.float32)})
    with pytest.raises(TFError) as raised:  # TF's own wording, so the pin below pins the right words
        tf_files.read_into_zeros(theirs, {"v": ([2], "float32")})
    assert raised.value.is_a("ValueError") and re.search(PHRASE, raised.value.message)
    for path in (theirs, tp.Checkpoint(v=tp.Variable(np.zeros(3, np.float32))).write(str(tmp_path / "tp"))):
        with pytest.raises(tp.errors.InvalidArgumentError, match=PHRASE + r" \[3\]") as caught:
            tp.Checkpoint(v=tp.Variable(np.zeros(2, np.float32))).read(path)
        assert "float32[2]" in str(caught.value) and "(root).v" in str(caught.value)
