"""Sharding callbacks: TF's MaxShardSizePolicy output byte for byte, custom callbacks, validation."""

from __future__ import annotations

import filecmp
import os

import numpy as np
import pytest

import trackpoint as tp
from tests.golden import values
from tests.helpers import GOLDEN, EveryTensorAlone, assert_bit_equal
from trackpoint import sharding


def _options(callback: sharding.ShardingCallback) -> tp.CheckpointOptions:
    return tp.CheckpointOptions(experimental_sharding_callback=callback)


def test_max_shard_size_policy_matches_tf_golden_byte_for_byte(tmp_path) -> None:
    ckpt = tp.Checkpoint(**{k: tp.Variable(v) for k, v in values.sharded_values().items()})
    ckpt.write(str(tmp_path / "ckpt"), _options(sharding.MaxShardSizePolicy(64)))
    golden = GOLDEN / "sharded"
    assert sorted(os.listdir(tmp_path)) == sorted(os.listdir(golden))
    for name in os.listdir(golden):
        assert filecmp.cmp(tmp_path / name, golden / name, shallow=False), name


def _variables() -> dict[str, tp.Variable]:
    rng = np.random.default_rng(0)
    return {
        "big": tp.Variable(rng.standard_normal((37, 11)).astype(np.float32)),
        "cube": tp.Variable(rng.standard_normal((5, 6, 7))),
        "ints": tp.Variable(np.arange(100, dtype=np.int16)),
        "scalar": tp.Variable(np.float64(3.5)),
        "words": tp.Variable(np.array([b"alpha", b"b" * 300, b""], dtype=object)),
        "empty": tp.Variable(np.zeros((0, 3), np.float32)),
        "long_string": tp.Variable(b"x" * 500),
    }


@pytest.mark.parametrize("size", [8, 16, 64, 100, 1000, 1 << 20])
def test_sharded_checkpoints_restore_at_many_sizes(tmp_path, size: int) -> None:
    source = _variables()
    path = tp.Checkpoint(**source).write(str(tmp_path / "c"), _options(sharding.MaxShardSizePolicy(size)))
    target = {
        k: tp.Variable(
            np.zeros_like(v.numpy())
            if v.dtype != object
            else (b"" if v.shape == () else np.array([b""] * v.shape[0], dtype=object))
        )
        for k, v in source.items()
    }
    tp.Checkpoint(**target).read(path).assert_consumed()
    for name, variable in source.items():
        assert_bit_equal(target[name].numpy(), variable.numpy())
    data_files = [f for f in os.listdir(tmp_path) if ".data-" in f]
    if size < 1000:
        assert len(data_files) > 3


def test_strings_are_never_sliced_and_oversized_ones_get_their_own_shard() -> None:
    """TF slices string tensors (then cannot restore them) or loops forever on long elements."""
    words = np.array([b"a" * 50, b"bb", b"c" * 70], dtype=object)
    tensor = sharding.ShardableTensor(words, np.dtype(object), None, "w", (3,), "", "w")  # type: ignore[arg-type]
    small = sharding.ShardableTensor(np.zeros(2, np.float32), np.dtype(np.float32), None, "s", (2,), "", "s")  # type: ignore[arg-type]
    shards = sharding.MaxShardSizePolicy(16)([small, tensor])
    assert shards == [{"s": {"2 0,2": small.tensor}}, {"w": {"": words}}]


def test_thinnest_slice_gets_its_own_shard_when_nothing_fits() -> None:
    cube = np.zeros((2, 3, 4), np.float64)  # the thinnest slice (along axis 2) has 48 bytes
    tensor = sharding.ShardableTensor(cube, cube.dtype, None, "c", cube.shape, "", "c")  # type: ignore[arg-type]
    shards = sharding.MaxShardSizePolicy(16)([tensor])
    from trackpoint._saving.sharding_policies import validate_shards

    validate_shards(shards, [tensor], "test")  # every element exactly once
    parts = [value for shard in shards for value in shard["c"].values()]
    assert all(value.nbytes <= 48 for value in parts) and any(value.nbytes > 16 for value in parts)


def test_custom_callback(tmp_path) -> None:
    source = _variables()
    path = tp.Checkpoint(**source).write(str(tmp_path / "c"), _options(EveryTensorAlone()))
    count = len(source) + 1  # every variable and the object graph
    assert sorted(f for f in os.listdir(tmp_path) if ".data-" in f) == [
        f"c.data-{i:05d}-of-{count:05d}" for i in range(count)
    ]
    reader = tp.load_checkpoint(path)
    assert_bit_equal(reader.get_tensor("big/.ATTRIBUTES/VARIABLE_VALUE"), source["big"].numpy())


class Broken(sharding.ShardingCallback):
    def __init__(self, how: str) -> None:
        self.how = how

    @property
    def description(self) -> str:
        return f"broken: {self.how}"

    def __call__(self, shardable_tensors):
        shard = {t.checkpoint_key: {t.slice_spec: t.tensor} for t in shardable_tensors}
        key = "v/.ATTRIBUTES/VARIABLE_VALUE"
        if self.how == "drop":
            del shard[key]
        elif self.how == "add":
            shard["ghost"] = {"": np.zeros(1)}
        elif self.how == "dtype":
            shard[key] = {"": np.zeros((4, 2), np.float64)}
        elif self.how == "shape":
            shard[key] = {"": np.zeros((2, 4), np.float32)}
        elif self.how == "duplicate":
            return [shard, {key: {"": shard[key][""]}}]
        elif self.how == "overlap":
            value = shard[key][""]
            shard[key] = {"4 2 0,3:-": value[:3], "4 2 2,2:-": value[2:]}
        elif self.how == "gap":
            shard[key] = {"4 2 0,3:-": shard[key][""][:3]}
        elif self.how == "not a list":
            return shard
        return [shard]


# The second phrase is TF's, as its sharding_util_test matches it (None: TF has no such check).
@pytest.mark.parametrize(
    "how, message, tf_phrase",
    [
        ("drop", "dropped 'v/", "tensors in the object graph were not found in the checkpoint shards"),
        ("add", "added 'ghost'", "a tensor not originally in the object graph"),
        ("dtype", "changed the dtype of 'v/", "a tensor was found with an altered dtype"),
        ("shape", "holds shape", "a tensor was found with an altered shape"),
        (
            "duplicate",
            "overlapping or repeated slices of 'v/",
            "multiple tensors with the same checkpoint key and slice spec were found",
        ),
        ("overlap", "overlapping or repeated", None),
        ("gap", "do not cover it exactly", None),
        ("not a list", "list of shards", None),
    ],
)
def test_bad_callback_output_is_rejected_naming_the_key(tmp_path, how: str, message: str, tf_phrase: str) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(np.zeros((4, 2), np.float32)))
    with pytest.raises(tp.errors.ShardingCallbackError, match=message) as caught:
        ckpt.write(str(tmp_path / "c"), _options(Broken(how)))
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, tp.errors.InvalidArgumentError)
    assert tf_phrase is None or tf_phrase in str(caught.value)
    assert not (tmp_path / "c.index").exists()


def test_device_policy_alias_and_shardable_tensor_fields(tmp_path) -> None:
    assert sharding.ShardByDevicePolicy is sharding.ShardByTaskPolicy
    seen = []

    class Spy(sharding.ShardByTaskPolicy):
        def __call__(self, shardable_tensors):
            seen.extend(shardable_tensors)
            return super().__call__(shardable_tensors)

    v = tp.Variable([1.0, 2.0])
    tp.Checkpoint(v=v).write(str(tmp_path / "c"), _options(Spy()))
    first = seen[0]
    assert (first.checkpoint_key, first.name, first.shape, first.slice_spec) == (
        "v/.ATTRIBUTES/VARIABLE_VALUE",
        "v/.ATTRIBUTES/VARIABLE_VALUE",
        (2,),
        "",
    )
    assert first.trackable is v and first.dtype == np.float32
    assert str(first.device) == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert seen[-1].checkpoint_key == "_CHECKPOINTABLE_OBJECT_GRAPH"
    with pytest.raises(tp.errors.InvalidArgumentError):
        sharding.MaxShardSizePolicy(0)
