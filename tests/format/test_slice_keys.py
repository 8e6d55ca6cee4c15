"""Slice keys are binary (OrderedCode); messages and listings show them as ``key[0:4,:]``."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trackpoint as tp
from tests.format.bundle_helpers import index_items
from trackpoint._format import slices, sstable
from trackpoint._storage import naming

SLICED = tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(64))


def test_a_slice_key_reads_as_the_key_and_its_extents() -> None:
    raw = b"\x00big/.ATTRIBUTES/VARIABLE_VALUE\x00\x01\x01\x02\x84\x83\x80\x84"  # rows 4..6 (format doc 1.10)
    assert slices.decode_slice_key(raw) == ("big/.ATTRIBUTES/VARIABLE_VALUE", ((4, 3), (0, 4)))
    assert slices.readable_key(raw) == "big/.ATTRIBUTES/VARIABLE_VALUE[4:7,0:4]"
    assert slices.readable_key(raw.decode("utf-8", "surrogateescape")) == "big/.ATTRIBUTES/VARIABLE_VALUE[4:7,0:4]"
    assert slices.readable_key(slices.encode_slice_key("w", ((0, 2), (0, -1)))) == "w[0:2,:]"


def test_other_keys_read_as_themselves() -> None:
    for key in [
        "w",
        "",
        "model/\x00odd",
        b"\x00",
        b"\x00w",
        b"\x00w\x00\x01",
        b"\x00w\x00\x01\x01\x02\x80",
        b"\x00w\x00\x01\x00trailing",
    ]:
        text = key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key
        assert slices.decode_slice_key(key) is None, key
        assert slices.readable_key(key) == text


@given(
    st.text(st.characters(blacklist_categories=("Cs",)) | st.sampled_from(["\x00", "\xff", "\udcff"])),
    st.lists(
        st.tuples(st.integers(0, 1 << 62), st.integers(-1, 1 << 62)).map(lambda e: (0, -1) if e[1] == -1 else e),
        max_size=6,
    ),
)
def test_decoding_inverts_encoding(key: str, extents: list[tuple[int, int]]) -> None:
    assert slices.decode_slice_key(slices.encode_slice_key(key, tuple(extents))) == (key, tuple(extents))


def _sliced(tmp_path) -> str:
    return tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.arange(40, dtype=np.float32).reshape(10, 4)}, SLICED)


def test_a_damaged_slice_is_named_readably(tmp_path) -> None:
    prefix = _sliced(tmp_path)
    data = prefix + ".data-00000-of-00003"
    with open(data, "r+b") as f:  # the first slice, rows 0..3
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    with pytest.raises(tp.errors.DataLossError) as caught:
        tp.load_checkpoint(prefix).get_tensor("w")
    message = str(caught.value)
    assert "'w[0:4,0:4]'" in message and "\\x00" not in message, message
    damage = tp.verify_checkpoint(prefix)
    assert damage and all("\\x00" not in d.message and "\x00" not in (d.key or "") for d in damage), damage


def test_a_missing_shard_names_the_slice_readably(tmp_path) -> None:
    prefix = _sliced(tmp_path)
    os.remove(prefix + ".data-00001-of-00003")
    with pytest.raises(tp.errors.NotFoundError) as caught:
        tp.load_checkpoint(prefix).get_tensor("w")
    message = str(caught.value)
    assert "'w[4:7,0:4]'" in message and "\\x00" not in message, message


def test_verify_lists_a_damaged_slice_entry_under_a_readable_key(tmp_path) -> None:
    prefix = _sliced(tmp_path)
    items = index_items(prefix)
    slice_row = next(i for i, (key, _) in enumerate(items) if key.startswith(b"\x00"))
    items[slice_row] = (items[slice_row][0], b"\xff")  # no BundleEntryProto
    pathlib.Path(naming.index_filename(prefix)).write_bytes(sstable.build_table(items))
    assert "w[0:4,0:4]" in [d.key for d in tp.verify_checkpoint(prefix)]
