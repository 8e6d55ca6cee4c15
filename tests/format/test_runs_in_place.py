"""Small tensors read in runs straight into memory their owners gave (``_format/runs_in_place.py``):
verified first, destinations untouched until the copy, every run scattered with ``preadv``."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format import pread, sstable
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import encode_entry
from trackpoint._format.crc import crc32c, mask
from trackpoint._format.in_place import InPlace
from trackpoint._format.index_write import header_bytes
from trackpoint._storage import naming


def _zeros(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {key: np.zeros_like(value) for key, value in tensors.items()}


def _read(prefix: str, keys: list[str], in_place: InPlace) -> list[Any]:
    with BundleReader(prefix) as reader:
        values = [v for batch in reader.read_batches(keys, 1 << 20, in_place) for v in batch]
        in_place.copy({})
    return values


def test_small_tensors_are_verified_then_read_into_their_destinations(tmp_path) -> None:
    """Every other tensor offered: the rest (and a string) are read as usual, the offered ones are
    handed out as their destinations, untouched until the copy, then hold the saved values."""
    rng = np.random.default_rng(0)
    tensors: dict[str, Any] = {f"t{i:03d}": rng.standard_normal(int(rng.integers(1, 300))) for i in range(200)}
    tensors["t050"] = tensors["t050"].astype(np.float32)  # another dtype among them
    tensors["words"] = np.array([b"a", b"bc"], dtype=object)
    prefix = tp.save_tensors(str(tmp_path / "b"), tensors)
    keys = sorted(tensors)
    offered = {key for i, key in enumerate(keys) if i % 2 and key != "words"}
    outs = _zeros({key: tensors[key] for key in offered})
    asked: list[tuple[list[int], list[int]]] = []

    def destinations(rows: Any, small: Any) -> dict[int, np.ndarray]:
        asked.append((list(rows), list(small)))
        return {row: outs[keys[row]] for row in small if keys[row] in offered}

    in_place = InPlace(destinations, small=True)
    with BundleReader(prefix) as reader:
        values = [v for batch in reader.read_batches(keys, 1 << 20, in_place) for v in batch]
        for key, value in zip(keys, values):
            if key in offered:
                assert value is outs[key] and not value.any()  # verified, not yet copied
            else:
                np.testing.assert_array_equal(value, tensors[key])
        in_place.copy({})
    assert len(asked) == 1 and not asked[0][0] and len(asked[0][1]) == len(keys) - 1  # one call, the string left out
    for key in offered:
        np.testing.assert_array_equal(outs[key], tensors[key])


def test_without_small_no_small_tensor_is_offered(tmp_path) -> None:
    tensors = {f"t{i}": np.full(8, i, np.float32) for i in range(5)}
    prefix = tp.save_tensors(str(tmp_path / "b"), tensors)
    asked = []
    in_place = InPlace(lambda rows, small: asked.append((rows, small)) or {})
    values = _read(prefix, sorted(tensors), in_place)
    assert not asked and not in_place.claimed
    for key, value in zip(sorted(tensors), values):
        np.testing.assert_array_equal(value, tensors[key])


def test_a_run_of_more_tensors_than_one_preadv_takes(tmp_path) -> None:
    count = 3 * pread._IOV_MAX + 5  # one run of 4 MiB at most: split among several preadv calls
    tensors = {f"t{i:05d}": np.full(3, i, np.int32) for i in range(count)}
    prefix = tp.save_tensors(str(tmp_path / "b"), tensors)
    keys = sorted(tensors)
    outs = _zeros(tensors)
    in_place = InPlace(lambda rows, small: {row: outs[keys[row]] for row in small}, small=True)
    _read(prefix, keys, in_place)
    assert all((outs[key] == int(key[1:])).all() for key in keys)


def test_gaps_between_offered_tensors_are_read_through(tmp_path) -> None:
    """Offered tensors with unoffered ones between them, in one run: the bytes between go to scratch."""
    tensors = {f"t{i:03d}": np.full(100 + i, i, np.float64) for i in range(60)}
    prefix = tp.save_tensors(str(tmp_path / "b"), tensors)
    keys = sorted(tensors)
    wanted = keys[::3]
    outs = _zeros({key: tensors[key] for key in wanted})
    in_place = InPlace(lambda rows, small: {row: outs[wanted[row]] for row in small}, small=True)
    _read(prefix, wanted, in_place)
    for key in wanted:
        np.testing.assert_array_equal(outs[key], tensors[key])


def test_a_damaged_small_tensor_raises_before_any_destination_is_written(tmp_path) -> None:
    tensors = {f"t{i}": np.full(64, i + 1, np.float32) for i in range(10)}
    prefix = tp.save_tensors(str(tmp_path / "b"), tensors)
    keys = sorted(tensors)
    with BundleReader(prefix) as reader:
        entry = reader.entry("t7")
        path = reader.data_path(entry.shard_id)
    with open(path, "r+b") as f:
        f.seek(entry.offset + 10)
        f.write(b"\xff")
    outs = _zeros(tensors)
    in_place = InPlace(lambda rows, small: {row: outs[keys[row]] for row in small}, small=True)
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch for key 't7'"):
        _read(prefix, keys, in_place)
    assert not any(out.any() for out in outs.values())


def _append(path: str) -> None:
    with open(path, "ab") as f:
        f.write(b"x")


@pytest.mark.parametrize("change", [_append, lambda path: os.truncate(path, 100)], ids=["appended", "cut short"])
def test_a_file_changed_between_the_passes_raises(tmp_path, change) -> None:
    tensors = {f"t{i}": np.full(64, i + 1, np.float32) for i in range(10)}
    prefix = tp.save_tensors(str(tmp_path / "b"), tensors)
    keys = sorted(tensors)
    outs = _zeros(tensors)
    in_place = InPlace(lambda rows, small: {row: outs[keys[row]] for row in small}, small=True)
    with BundleReader(prefix) as reader:
        list(reader.read_batches(keys, 1 << 20, in_place))
        change(reader.data_path(0))
        with pytest.raises(tp.errors.DataLossError, match="changed while"):
            in_place.copy({})


def test_destinations_that_do_not_fit_are_read_as_usual(tmp_path) -> None:
    tensors = {"a": np.ones(10, np.float32), "b": np.full(7, 2.0, np.float32), "c": np.ones(3), "d": np.ones(4)}
    prefix = tp.save_tensors(str(tmp_path / "b"), tensors)
    shared = np.zeros(10, np.float32)
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    offered = {0: shared, 1: shared, 2: np.zeros(3, np.float32), 3: frozen}  # twice, another dtype, read-only
    in_place = InPlace(lambda rows, small: offered, small=True)
    values = _read(prefix, list("abcd"), in_place)
    assert not in_place.claimed
    for key, value in zip("abcd", values):
        np.testing.assert_array_equal(value, tensors[key])
    assert not shared.any() and not frozen.any()


def test_tensors_over_shared_bytes_are_copied_from_scratch(tmp_path) -> None:
    """An index may say two tensors share bytes; one preadv cannot scatter them, so the run is
    read into scratch and each tensor copied from it."""
    prefix = str(tmp_path / "b")
    data = np.arange(24, dtype=np.float32).tobytes()
    a, b = data[:64], data[32:96]
    entries = {
        b"a": encode_entry(1, [16], 0, 0, 64, mask(crc32c(a))),
        b"b": encode_entry(1, [16], 0, 32, 64, mask(crc32c(b))),
    }
    pathlib.Path(naming.data_filename(prefix, 0, 1)).write_bytes(data)
    items = [(b"", header_bytes(1)), *sorted(entries.items())]
    pathlib.Path(naming.index_filename(prefix)).write_bytes(sstable.build_table(items))
    outs = {"a": np.zeros(16, np.float32), "b": np.zeros(16, np.float32)}
    in_place = InPlace(lambda rows, small: {row: outs["ab"[row]] for row in small}, small=True)
    _read(prefix, ["a", "b"], in_place)
    np.testing.assert_array_equal(outs["a"], np.arange(16, dtype=np.float32))
    np.testing.assert_array_equal(outs["b"], np.arange(8, 24, dtype=np.float32))
