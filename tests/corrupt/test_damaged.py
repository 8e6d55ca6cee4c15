"""Damaged and hostile checkpoint files raise the right ``trackpoint.errors`` class, naming file and key."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
from collections.abc import Iterator

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import GOLDEN
from trackpoint._format import slices, sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.index_write import header_bytes
from trackpoint._storage import naming
from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError


@pytest.fixture
def ckpt(tmp_path) -> str:
    prefix = str(tmp_path / "ckpt")
    tp.save_tensors(prefix, {"w": np.arange(100, dtype=np.float32), "s": np.array([b"ab", b"cde"], dtype=object)})
    return prefix


def _index_with(prefix: str, entries: dict[bytes, pb.BundleEntryProto], num_shards: int = 1) -> None:
    items = [(b"", header_bytes(num_shards))] + [(k, entries[k].SerializeToString()) for k in sorted(entries)]
    with open(naming.index_filename(prefix), "wb") as f:
        f.write(sstable.build_table(items))


def _entry(dtype: int, shape: list[int], offset: int = 0, size: int = 0, shard: int = 0) -> pb.BundleEntryProto:
    entry = pb.BundleEntryProto(dtype=dtype, offset=offset, size=size, shard_id=shard)
    entry.shape.SetInParent()
    for d in shape:
        entry.shape.dim.add().size = d
    return entry


@contextlib.contextmanager
def _address_space_limit(limit: int) -> Iterator[None]:
    """Any allocation the file cannot justify would fail with MemoryError under this limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes((byte[0] ^ 0x10,)))


def test_every_flipped_byte_of_the_data_file_is_caught(ckpt: str) -> None:
    data = naming.data_filename(ckpt, 0, 1)
    size = os.path.getsize(data)
    for offset in range(size):
        _flip(data, offset)
        reader = tp.load_checkpoint(ckpt)
        with pytest.raises(DataLossError) as info:
            reader.get_tensor("w" if offset < 400 else "s")
        assert data in str(info.value) and ("'w'" in str(info.value) or "'s'" in str(info.value))
        _flip(data, offset)


def test_every_flipped_byte_of_the_index_is_caught_or_harmless(ckpt: str) -> None:
    index = naming.index_filename(ckpt)
    size = os.path.getsize(index)
    for offset in range(size):
        _flip(index, offset)
        try:
            reader = tp.load_checkpoint(ckpt)
            reader.get_tensor("w")
            reader.get_tensor("s")
        except (DataLossError, InvalidArgumentError, NotFoundError):
            pass  # the footer's padding and unused metaindex are not covered by any crc
        _flip(index, offset)


def test_truncated_files(ckpt: str) -> None:
    data = naming.data_filename(ckpt, 0, 1)
    os.truncate(data, 100)
    with pytest.raises(DataLossError, match="truncated"):
        tp.load_checkpoint(ckpt).get_tensor("w")
    index = naming.index_filename(ckpt)
    os.truncate(index, os.path.getsize(index) - 10)
    with pytest.raises(DataLossError, match=r"ckpt\.index"):
        tp.load_checkpoint(ckpt)


def test_bad_magic(ckpt: str) -> None:
    _flip(naming.index_filename(ckpt), os.path.getsize(naming.index_filename(ckpt)) - 1)
    with pytest.raises(DataLossError, match="bad magic"):
        tp.load_checkpoint(ckpt)


def test_size_disagreeing_with_shape(ckpt: str) -> None:
    _index_with(ckpt, {b"w": _entry(1, [1000], size=400)})
    with pytest.raises(DataLossError, match="invalid size in bundle entry 'w'.*needs 4000 bytes"):
        tp.load_checkpoint(ckpt).get_tensor("w")


def test_offset_past_end_of_shard(ckpt: str) -> None:
    _index_with(ckpt, {b"w": _entry(1, [100], offset=10**12, size=400)})
    with pytest.raises(DataLossError, match="truncated or the index is damaged"):
        tp.load_checkpoint(ckpt).get_tensor("w")


def test_shard_id_beyond_shard_count(ckpt: str) -> None:
    _index_with(ckpt, {b"w": _entry(1, [100], size=400, shard=7)})
    with pytest.raises(DataLossError, match="names data shard 7 but the header declares 1"):
        tp.load_checkpoint(ckpt).get_tensor("w")


def test_negative_dimension_and_unknown_dtype(ckpt: str) -> None:
    _index_with(ckpt, {b"n": _entry(1, [-5], size=0), b"v": _entry(21, [1], size=4)})
    reader = tp.load_checkpoint(ckpt)
    with pytest.raises(DataLossError, match="negative dimension"):
        reader.get_tensor("n")
    with pytest.raises(InvalidArgumentError, match="DT_VARIANT"):
        reader.get_tensor("v")


def test_huge_string_shape_does_not_allocate(ckpt: str) -> None:
    """TF 2.21's reader segfaults on a tiny index declaring a huge string tensor; we refuse it cheaply."""
    _index_with(ckpt, {b"s": _entry(7, [2**40, 2**20], size=8)})
    with _address_space_limit(4 << 30), pytest.raises(DataLossError, match="strings in 8 bytes"):
        tp.load_checkpoint(ckpt).get_tensor("s")


def test_huge_numeric_shape_is_refused_before_allocating(ckpt: str) -> None:
    """Size agrees with the shape (4 TiB), but the shard cannot hold it: no allocation happens."""
    _index_with(ckpt, {b"w": _entry(1, [2**40], size=2**42)})
    with _address_space_limit(4 << 30), pytest.raises(DataLossError, match="truncated or the index is damaged"):
        tp.load_checkpoint(ckpt).get_tensor("w")


def test_string_lengths_past_the_entry(tmp_path) -> None:
    prefix = str(tmp_path / "c")
    tp.save_tensors(prefix, {"s": np.array([b"abc"], dtype=object)})
    data = naming.data_filename(prefix, 0, 1)
    with open(data, "r+b") as f:
        f.write(b"\x7f")  # claim a 127-byte string
    with pytest.raises(DataLossError):
        tp.load_checkpoint(prefix).get_tensor("s")


def test_malformed_entry_protobuf(ckpt: str) -> None:
    items = [(b"", header_bytes(1)), (b"w", b"\xff\xff\xff")]
    with open(naming.index_filename(ckpt), "wb") as f:
        f.write(sstable.build_table(items))
    with pytest.raises(DataLossError, match="malformed entry for key 'w'"):
        tp.load_checkpoint(ckpt).get_tensor("w")


def test_missing_header(ckpt: str) -> None:
    with open(naming.index_filename(ckpt), "wb") as f:
        f.write(sstable.build_table([(b"w", b"")]))
    with pytest.raises(DataLossError, match="no bundle header"):
        tp.load_checkpoint(ckpt)


def _sliced(prefix: str, boxes: list[tuple[tuple[int, int], ...]]) -> None:
    full = _entry(1, [4, 4])
    entries = {b"t": full}
    offset = 0
    os.truncate(naming.data_filename(prefix, 0, 1), 0)
    with open(naming.data_filename(prefix, 0, 1), "wb") as f:
        for extents in boxes:
            full.slices.append(slices.extents_to_proto(extents))
            shape = [length for _, length in extents]
            data = np.zeros(shape, np.float32).tobytes()
            from trackpoint._format.crc import crc32c, mask

            part = _entry(1, shape, offset=offset, size=len(data))
            part.crc32c = mask(crc32c(data))
            f.write(data)
            offset += len(data)
            entries[slices.encode_slice_key("t", extents)] = part
    _index_with(prefix, entries)


def test_overlapping_slices(ckpt: str) -> None:
    _sliced(ckpt, [((0, 2), (0, 4)), ((1, 3), (0, 4))])  # 20 elements claimed for 16
    with pytest.raises(DataLossError, match="overlapping or incomplete"):
        tp.load_checkpoint(ckpt).get_tensor("t")
    _sliced(ckpt, [((0, 2), (0, 4)), ((1, 1), (0, 4)), ((3, 1), (0, 4))])  # volumes add up, boxes overlap
    with pytest.raises(DataLossError, match="overlap"):
        tp.load_checkpoint(ckpt).get_tensor("t")


def test_incomplete_and_out_of_range_slices(ckpt: str) -> None:
    _sliced(ckpt, [((0, 2), (0, 4))])
    with pytest.raises(DataLossError, match="cover 8 of its 16"):
        tp.load_checkpoint(ckpt).get_tensor("t")
    _sliced(ckpt, [((0, 2), (0, 4)), ((2, 3), (0, 4))])
    with pytest.raises(DataLossError, match="outside dimension"):
        tp.load_checkpoint(ckpt).get_tensor("t")


def test_missing_shard_file(tmp_path) -> None:
    shutil.copytree(GOLDEN / "sharded", tmp_path / "s")
    prefix = str(tmp_path / "s" / "ckpt")
    os.unlink(naming.data_filename(prefix, 2, 14))
    with pytest.raises(NotFoundError, match=r"ckpt\.data-00002-of-00014.*missing"):
        tp.load_checkpoint(prefix).get_tensor("big/.ATTRIBUTES/VARIABLE_VALUE")


@pytest.mark.parametrize("content", [b"garbage {{{", b"\xff\xfe", b'all_model_checkpoint_paths: "x"\n'])
def test_garbage_state_file(tmp_path, content: bytes) -> None:
    (tmp_path / "checkpoint").write_bytes(content)
    with pytest.raises(InvalidArgumentError, match="checkpoint"):
        tp.latest_checkpoint(str(tmp_path))


def test_state_file_naming_a_missing_checkpoint(tmp_path) -> None:
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-9"\n')
    assert tp.latest_checkpoint(str(tmp_path)) is None
    with pytest.raises(NotFoundError, match=r"names .*ckpt-9, but .*ckpt-9.index is missing"):
        tp.load_checkpoint(str(tmp_path))


@pytest.mark.parametrize("where", [0, 3_000_000, 9_000_000, 12_582_911])
def test_large_tensor_read_in_parallel_parts_still_catches_one_flipped_byte(tmp_path, where: int) -> None:
    prefix = str(tmp_path / "big")
    value = np.arange(12_582_912 // 4, dtype=np.float32)  # 12 MiB: read by several threads
    tp.save_tensors(prefix, {"w": value})
    assert np.array_equal(tp.load_variable(prefix, "w"), value)
    _flip(naming.data_filename(prefix, 0, 1), where)
    with pytest.raises(DataLossError, match="checksum mismatch for key 'w'"):
        tp.load_variable(prefix, "w")
