"""The in-place read (``_format/in_place.py``) says why it declines an array offered, at DEBUG on
``trackpoint.reuse``: the tensor is then read into new memory, as without the shortcut."""

from __future__ import annotations

import logging

import numpy as np

import trackpoint as tp
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.in_place import InPlace


def test_an_array_that_does_not_fit_is_declined_with_the_reason(tmp_path, caplog) -> None:
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.ones(1 << 20, np.float32)})
    wrong = np.zeros(1 << 20, np.float64)  # another dtype than the tensor's
    with BundleReader(prefix) as reader, caplog.at_level(logging.DEBUG, logger="trackpoint.reuse"):
        entry = reader.entry("w")
        reader.checked(entry)
        assert InPlace(lambda rows, small: {0: wrong}).claim(reader, {0: entry}) == {}
    assert "1 of the 1 arrays offered are not read into" in caplog.text
    assert "dtype, shape or layout" in caplog.text
    assert not wrong.any()


def test_a_fitting_array_is_claimed_silently(tmp_path, caplog) -> None:
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.ones(1 << 20, np.float32)})
    out = np.zeros(1 << 20, np.float32)
    with BundleReader(prefix) as reader, caplog.at_level(logging.DEBUG, logger="trackpoint.reuse"):
        entry = reader.entry("w")
        reader.checked(entry)
        in_place = InPlace(lambda rows, small: {0: out})
        assert in_place.claim(reader, {0: entry}) == {0: out}
        in_place.verify()
        in_place.copy({0: out})
    assert "in place" not in caplog.text
    assert out.all()
