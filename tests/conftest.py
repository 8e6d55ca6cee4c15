"""Shared fixtures: golden checkpoint locations, value comparison, a sharding callback."""

from __future__ import annotations

import gc
import pathlib
from collections.abc import Iterator

import numpy as np
import pytest

from tests.reuse_log import ReuseLog, reuse_log
from trackpoint import sharding

# The generator needs TensorFlow and writes files; --doctest-modules must not import it.
collect_ignore = ["golden/make_golden.py"]

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def assert_bit_equal(got: object, expected: object) -> None:
    """Same dtype, shape and bytes (NaNs and -0.0 included); strings compared as bytes."""
    if isinstance(expected, bytes):
        assert isinstance(got, bytes) and got == expected
        return
    expected_arr = np.asarray(expected)
    got_arr = np.asarray(got)
    assert got_arr.dtype == expected_arr.dtype, (got_arr.dtype, expected_arr.dtype)
    assert got_arr.shape == expected_arr.shape, (got_arr.shape, expected_arr.shape)
    if expected_arr.dtype == object:
        assert all(isinstance(x, bytes) for x in got_arr.reshape(-1))
        assert got_arr.tolist() == expected_arr.tolist()
    else:
        assert got_arr.tobytes() == expected_arr.tobytes()


class EveryTensorAlone(sharding.ShardingCallback):
    """A custom sharding callback: one data file per tensor."""

    @property
    def description(self) -> str:
        return "one shard per tensor"

    def __call__(self, shardable_tensors):
        return [{t.checkpoint_key: {t.slice_spec: t.tensor}} for t in shardable_tensors]


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off: what a test frees, reference counting alone must free."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def reuse() -> Iterator[ReuseLog]:
    """What the ``trackpoint.reuse`` logger says during the test (see tests/reuse_log.py)."""
    with reuse_log() as log:
        yield log
