"""``BundleReader.read_region`` of a tensor stored whole keeps its rank: a 0-d tensor's region is
0-d (issue 38.2: DCP's reader reads every tensor as a region, BatchNorm counts and Adam steps
included), and a region of a larger one is a C-contiguous copy of its part."""

from __future__ import annotations

import numpy as np

import trackpoint as tp
from trackpoint._format.bundle_reader import BundleReader


def test_a_region_of_a_tensor_stored_whole_keeps_its_rank(tmp_path) -> None:
    prefix = str(tmp_path / "ckpt")
    matrix = np.arange(12, dtype=np.float32).reshape(3, 4)
    tp.save_tensors(prefix, {"count": np.int64(3), "step": np.float32(2.5), "m": matrix})
    with BundleReader(prefix) as reader:
        count = reader.read_region("count", [])
        assert count.shape == () and count.dtype == np.int64 and int(count) == 3
        step = reader.read_region("step", [])
        assert step.shape == () and step.dtype == np.float32 and float(step) == 2.5
        part = reader.read_region("m", [(1, 3), (1, 3)])
        assert part.flags.c_contiguous
        np.testing.assert_array_equal(part, matrix[1:3, 1:3])
        np.testing.assert_array_equal(reader.read_region("m", [(0, 3), (0, 4)]), matrix)
