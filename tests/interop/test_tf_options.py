"""TF 2.21 reads our sharded checkpoints and agrees on device strings and MaxShardSizePolicy layout."""

from __future__ import annotations

import filecmp
import os

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EveryTensorAlone
from tests.interop.tf_process import tf_side
from trackpoint import sharding
from trackpoint._saving.device_spec import parse_device

pytestmark = pytest.mark.interop

tf_options = tf_side("options")

VALUES = {
    "big": np.random.default_rng(0).standard_normal((37, 11)).astype(np.float32),
    "cube": np.random.default_rng(1).standard_normal((5, 6, 7)),
    "ints": np.arange(100, dtype=np.int16),
    "scalar": np.float64(3.5),
    "flag": np.array([True, False, True]),
}


# Below 240 bytes TF's partitioner never returns for "cube" (no slice of it fits an empty
# shard); test_sharding.py covers those sizes on our side.
@pytest.mark.parametrize("size", [240, 256, 1000, 4096, 1 << 20])
def test_layout_equals_tf_max_shard_size_policy(tmp_path, size: int) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    tp.Checkpoint(**{k: tp.Variable(v) for k, v in VALUES.items()}).write(
        str(ours / "c"), tp.CheckpointOptions(experimental_sharding_callback=sharding.MaxShardSizePolicy(size))
    )
    tf_options.write_sharded(str(theirs / "c"), VALUES, size)
    assert sorted(os.listdir(ours)) == sorted(os.listdir(theirs))
    for name in os.listdir(theirs):
        assert filecmp.cmp(ours / name, theirs / name, shallow=False), name


@pytest.mark.parametrize(
    "callback", [sharding.MaxShardSizePolicy(24), sharding.MaxShardSizePolicy(333), EveryTensorAlone()]
)
def test_tf_restores_our_sharded_checkpoints(tmp_path, callback: sharding.ShardingCallback) -> None:
    values = dict(VALUES, text=np.array([b"abc", b"d" * 40], dtype=object))
    path = tp.Checkpoint(**{k: tp.Variable(v) for k, v in values.items()}).write(
        str(tmp_path / "c"), tp.CheckpointOptions(experimental_sharding_callback=callback)
    )
    target = tf_options.read_like(path, values)
    for name, value in values.items():
        np.testing.assert_array_equal(target[name], value)


SPECS = [
    "/job:localhost",
    "CPU:0",
    "cpu:1",
    "GPU:*",
    "/job:worker/replica:0/task:1/device:CPU:0",
    "/device:TPU:3",
    "/job:a/task:2",
    "",
    "/",
    "//job:x",
    "/replica:7",
    "/device:FOO:1",
    "foo:0",
    "/task:x",
    "CPU:0/GPU:1",
    "/replica:1.5",
    "/device:CPU:x",
    "job:a:b",
    "/job:",
    "CPU",
    "/device:CPU:0/CPU:1",
]


@pytest.fixture(scope="module")
def tf_device_specs() -> dict[str, tuple | None]:
    """What ``tf.DeviceSpec.from_string`` makes of every spec (None: ValueError), in one call."""
    return tf_options.device_specs(SPECS)


@pytest.mark.parametrize("spec", SPECS)
def test_device_strings_parse_and_fail_as_tf_device_spec(tf_device_specs, spec: str) -> None:
    theirs = tf_device_specs[spec]
    if theirs is None:
        with pytest.raises(ValueError):
            parse_device(spec)
        with pytest.raises(ValueError):
            tp.CheckpointOptions(experimental_io_device=spec)
        return
    ours = parse_device(spec)
    assert (ours.job, ours.replica, ours.task, ours.device_type, ours.device_index) == theirs[:5]
    assert ours.to_string() == theirs[5]
