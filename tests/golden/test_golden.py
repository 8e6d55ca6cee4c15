"""TF-written golden checkpoints read back bit-exact, and our writer reproduces their bytes."""

from __future__ import annotations

import filecmp
import os
import shutil

import numpy as np
import pytest

import trackpoint as tp
from tests.golden import values
from tests.helpers import GOLDEN, assert_bit_equal
from trackpoint._format import slices
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import BundleWriter
from trackpoint._storage import naming


@pytest.mark.parametrize("key", list(values.dtype_tensors()))
def test_every_dtype_reads_bit_exact(key: str) -> None:
    reader = tp.load_checkpoint(str(GOLDEN / "dtypes" / "plain"))
    assert_bit_equal(reader.get_tensor(key), values.dtype_tensors()[key])


def test_scalars_come_back_as_numpy_scalars_and_bytes() -> None:
    reader = tp.load_checkpoint(str(GOLDEN / "dtypes" / "plain"))
    assert type(reader.get_tensor("scalar_int64")) is np.int64
    assert type(reader.get_tensor("scalar_float32")) is np.float32
    assert reader.get_tensor("string_scalar") == b"hello"


def test_shape_and_dtype_maps_match_the_values() -> None:
    reader = tp.load_checkpoint(str(GOLDEN / "dtypes" / "plain"))
    expected = values.dtype_tensors()
    assert reader.get_variable_to_shape_map() == {k: list(np.shape(v)) for k, v in expected.items()}
    dtypes = reader.get_variable_to_dtype_map()
    for key, value in expected.items():
        want = np.dtype(object) if isinstance(value, bytes) else np.asarray(value).dtype
        assert dtypes[key] == want, key


def test_many_keys_multi_block_index() -> None:
    prefix = str(GOLDEN / "many" / "plain")
    assert os.path.getsize(naming.index_filename(prefix)) > 262144  # more than one data block
    expected = values.many_tensors()
    reader = tp.load_checkpoint(prefix)
    assert sorted(reader.get_variable_to_shape_map()) == sorted(expected)
    for key in list(expected)[::97]:
        assert_bit_equal(reader.get_tensor(key), expected[key])


def test_sharded_and_sliced_checkpoint_assembles_full_tensors() -> None:
    prefix = str(GOLDEN / "sharded" / "ckpt")
    reader = tp.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    # slice entries are hidden; the sliced tensors appear whole
    assert shapes["big/.ATTRIBUTES/VARIABLE_VALUE"] == [10, 4]
    assert shapes["wide/.ATTRIBUTES/VARIABLE_VALUE"] == [3, 50]
    assert not any(k.startswith("\x00") for k in shapes)
    bundle = BundleReader(prefix)
    assert bundle.num_shards > 4
    assert len(bundle.entry("big/.ATTRIBUTES/VARIABLE_VALUE").slices) == 4
    for name, value in values.sharded_values().items():
        assert_bit_equal(reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE"), value)


def test_get_tensor_into_existing_array() -> None:
    reader = tp.load_checkpoint(str(GOLDEN / "sharded" / "ckpt"))
    out = np.zeros((10, 4), np.float32)
    result = reader.get_tensor("big/.ATTRIBUTES/VARIABLE_VALUE", out=out)
    assert result is out
    assert_bit_equal(out, values.sharded_values()["big"])
    with pytest.raises(tp.errors.InvalidArgumentError, match="cannot read it into"):
        reader.get_tensor("big/.ATTRIBUTES/VARIABLE_VALUE", out=np.zeros((4, 10), np.float32))


def test_manager_state_file_and_latest_checkpoint() -> None:
    directory = str(GOLDEN / "manager")
    state = tp.get_checkpoint_state(directory)
    assert state is not None
    assert state.model_checkpoint_path == os.path.join(directory, "ckpt-3")
    assert state.all_model_checkpoint_paths == (os.path.join(directory, "ckpt-2"), os.path.join(directory, "ckpt-3"))
    assert len(state.all_model_checkpoint_timestamps) == 2
    assert state.last_preserved_timestamp > 0
    assert tp.latest_checkpoint(directory) == os.path.join(directory, "ckpt-3")
    # a directory goes through its state file
    assert tp.load_variable(directory, "step/.ATTRIBUTES/VARIABLE_VALUE") == 3


def _rewrite(source: str, target: str, order: list[str]) -> None:
    writer = BundleWriter(target)
    reader = tp.load_checkpoint(source)
    for key in order:
        writer.add(key, reader.get_tensor(key))
    writer.finish()


@pytest.mark.parametrize("name", ["dtypes", "many"])
def test_writer_output_is_byte_identical_to_tf(tmp_path, name: str) -> None:
    source = str(GOLDEN / name / "plain")
    expected = values.dtype_tensors() if name == "dtypes" else values.many_tensors()
    target = str(tmp_path / "plain")
    tp.save_tensors(target, expected)  # same tensors, same order as TF's SaveV2 call
    for path in (naming.index_filename(target), naming.data_filename(target, 0, 1)):
        golden = path.replace(target, source)
        assert filecmp.cmp(path, golden, shallow=False), path


def test_sliced_multi_shard_writer_is_byte_identical_to_tf(tmp_path) -> None:
    """Lay out TF's sharded checkpoint again from its own index: same index, same data files."""
    source = str(GOLDEN / "sharded" / "ckpt")
    bundle = BundleReader(source)
    placed = []  # (shard, offset, full key, extents or None, value)
    for raw in bundle.raw_keys():
        entry = bundle.entry(raw)
        if entry.is_sliced:
            for proto in entry.slices:
                extents = slices.extents_from_proto(proto)
                part = bundle.entry(slices.encode_slice_key(entry.key, extents))
                value = bundle.read(part.key)
                placed.append((part.shard_id, part.offset, entry.key, entry.shape, extents, value))
        elif not raw.startswith(b"\x00"):
            placed.append((entry.shard_id, entry.offset, entry.key, entry.shape, None, bundle.read(entry.key)))
    target = str(tmp_path / "ckpt")
    writer = BundleWriter(target, num_shards=bundle.num_shards)
    for shard, _, key, shape, extents, value in sorted(placed, key=lambda p: (p[0], p[1])):
        if extents is None:
            writer.add(key, value, shard_id=shard)
        else:
            writer.add_slice(key, shape, extents, value, shard_id=shard)
    writer.finish()
    assert filecmp.cmp(naming.index_filename(target), naming.index_filename(source), shallow=False)
    for shard in range(bundle.num_shards):
        assert filecmp.cmp(
            naming.data_filename(target, shard, bundle.num_shards),
            naming.data_filename(source, shard, bundle.num_shards),
            shallow=False,
        )


def test_merge_bundles_of_slices(tmp_path) -> None:
    """Slices written to separate bundles merge into one checkpoint that assembles them."""
    from tests.format.bundle_helpers import merge_bundles

    full = np.arange(24, dtype=np.float32).reshape(6, 4)
    parts = []
    for i, (start, length) in enumerate([(0, 2), (2, 3), (5, 1)]):
        prefix = str(tmp_path / f"part-{i}")
        writer = BundleWriter(prefix)
        writer.add_slice("w", (6, 4), ((start, length), (0, -1)), full[start : start + length])
        if i == 1:
            writer.add("other", np.int64(5))
        writer.finish()
        parts.append(prefix)
    merged = str(tmp_path / "merged")
    merge_bundles(parts, merged)
    assert sorted(os.listdir(tmp_path)) == [
        "merged.data-00000-of-00003",
        "merged.data-00001-of-00003",
        "merged.data-00002-of-00003",
        "merged.index",
    ]
    reader = tp.load_checkpoint(merged)
    assert_bit_equal(reader.get_tensor("w"), full)
    assert reader.get_tensor("other") == 5
    assert reader.get_variable_to_shape_map() == {"w": [6, 4], "other": []}


def test_merge_rejects_duplicate_whole_keys(tmp_path) -> None:
    from tests.format.bundle_helpers import merge_bundles

    for name in ("a", "b"):
        tp.save_tensors(str(tmp_path / name), {"x": np.zeros(2)})
    with pytest.raises(tp.errors.InvalidArgumentError, match="duplicate"):
        merge_bundles([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "m"))


def test_copied_checkpoint_reads_from_any_directory(tmp_path) -> None:
    shutil.copytree(GOLDEN / "dtypes", tmp_path / "copy")
    assert tp.load_variable(str(tmp_path / "copy" / "plain"), "string_scalar") == b"hello"
