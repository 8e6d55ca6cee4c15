"""Real TensorFlow 2.21 reads what trackpoint writes, byte for byte what it would write itself."""

from __future__ import annotations

import filecmp
import os

import numpy as np
import pytest

import trackpoint as tp
from tests.format.bundle_helpers import merge_bundles
from tests.golden import values
from tests.helpers import assert_bit_equal
from tests.interop.tf_process import tf_side
from trackpoint._format.bundle_writer import BundleWriter
from trackpoint._format.state_file import write_state
from trackpoint._storage import naming

pytestmark = pytest.mark.interop

tf_files, tf_format = tf_side("files"), tf_side("format")


@pytest.mark.parametrize("key", list(values.dtype_tensors()))
def test_tf_reads_every_dtype_we_write(tmp_path, key: str) -> None:
    prefix = str(tmp_path / "ckpt")
    tensors = values.dtype_tensors()
    tp.save_tensors(prefix, tensors)
    reader = tf_files.load(prefix, [key])
    expected = tensors[key]
    got = reader["tensors"][key]
    want_dtype = (
        "string"
        if isinstance(expected, bytes) or np.asarray(expected).dtype == object
        else np.asarray(expected).dtype.name
    )
    assert reader["dtypes"][key] == want_dtype
    assert reader["shapes"][key] == list(np.shape(expected))
    assert_bit_equal(got, expected if isinstance(expected, bytes) else np.asarray(expected))


@pytest.mark.parametrize("seed", range(6))
def test_random_tensors_byte_identical_to_tf(tmp_path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.float16, np.complex64, np.bool_]
    tensors: dict[str, np.ndarray] = {}
    for i in range(int(rng.integers(1, 400))):
        dtype = kinds[int(rng.integers(len(kinds)))]
        shape = tuple(int(d) for d in rng.integers(0, 6, size=int(rng.integers(0, 4))))
        name = f"v{int(rng.integers(10**6))}/" + "x" * int(rng.integers(0, 300)) + f"/{i}"
        tensors[name] = (rng.standard_normal(shape) * 100).astype(dtype)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    tp.save_tensors(ours, tensors)
    tf_format.save_v2(theirs, tensors)
    assert filecmp.cmp(naming.index_filename(ours), naming.index_filename(theirs), shallow=False)
    assert filecmp.cmp(naming.data_filename(ours, 0, 1), naming.data_filename(theirs, 0, 1), shallow=False)


def test_tf_reads_our_sliced_multi_shard_bundle(tmp_path) -> None:
    full = np.random.default_rng(3).standard_normal((9, 7)).astype(np.float32)
    counts = np.arange(30, dtype=np.int64).reshape(5, 6)
    prefix = str(tmp_path / "ckpt")
    writer = BundleWriter(prefix, num_shards=3)
    writer.add_slice("w", (9, 7), ((0, 4), (0, -1)), full[:4], shard_id=0)
    writer.add_slice("w", (9, 7), ((4, 5), (0, 3)), full[4:, :3], shard_id=1)
    writer.add_slice("w", (9, 7), ((4, 5), (3, 4)), full[4:, 3:], shard_id=2)
    writer.add_slice("c", (5, 6), ((0, 5), (0, 2)), counts[:, :2], shard_id=2)
    writer.add_slice("c", (5, 6), ((0, 5), (2, 4)), counts[:, 2:], shard_id=0)
    writer.add("s", b"scalar string", shard_id=1)
    writer.finish()
    reader = tf_files.load(prefix)
    assert reader["shapes"] == {"w": [9, 7], "c": [5, 6], "s": []}
    assert_bit_equal(reader["tensors"]["w"], full)
    assert_bit_equal(reader["tensors"]["c"], counts)
    assert reader["tensors"]["s"] == b"scalar string"


def test_tf_reads_our_merged_bundle(tmp_path) -> None:
    parts = []
    for i in range(3):
        prefix = str(tmp_path / f"part{i}")
        tp.save_tensors(prefix, {f"t{i}": np.full((2,), i, np.int32)})
        parts.append(prefix)
    merged = str(tmp_path / "merged")
    merge_bundles(parts, merged)
    tensors = tf_files.load(merged)["tensors"]
    for i in range(3):
        assert tensors[f"t{i}"].tolist() == [i, i]


def test_tf_reads_our_state_file(tmp_path) -> None:
    directory = str(tmp_path)
    for n in (1, 2):
        tp.save_tensors(os.path.join(directory, f"ckpt-{n}"), {"x": np.int64(n)})
    write_state(directory, os.path.join(directory, "ckpt-2"), [os.path.join(directory, "ckpt-1")], [10.5, 20.25], 5.0)
    state = tf_files.checkpoint_state(directory)
    assert state["model_checkpoint_path"] == os.path.join(directory, "ckpt-2")
    assert state["all_model_checkpoint_paths"] == [os.path.join(directory, f"ckpt-{n}") for n in (1, 2)]
    assert state["all_model_checkpoint_timestamps"] == [10.5, 20.25]
    assert state["latest_checkpoint"] == os.path.join(directory, "ckpt-2")
    assert (tmp_path / "checkpoint").read_text() == (
        'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n'
        "all_model_checkpoint_timestamps: 10.5\nall_model_checkpoint_timestamps: 20.25\nlast_preserved_timestamp: 5.0\n"
    )


def test_we_read_tf_checkpoint_save_state_file(tmp_path) -> None:
    path, theirs = tf_format.checkpoint_save(str(tmp_path / "ckpt"), [1.0, 2.0])
    assert tp.latest_checkpoint(str(tmp_path)) == path
    assert tp.load_variable(str(tmp_path), "v/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [1.0, 2.0]
    assert tp.list_variables(path) == theirs
