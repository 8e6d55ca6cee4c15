"""The safetensors format as trackpoint reads and writes it, checked against the ``safetensors`` library."""

from __future__ import annotations

import json
import os
import pathlib
import struct

import ml_dtypes
import numpy as np
import pytest

import trackpoint as tp
from trackpoint.tools._safetensors_format import SafetensorsFile
from trackpoint.tools._safetensors_writer import SafetensorsWriter

safetensors = pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")
from safetensors.numpy import load_file as np_load
from safetensors.numpy import save_file as np_save
from safetensors.torch import load_file as torch_load
from safetensors.torch import save_file as torch_save

_RNG = np.random.default_rng(0)


def _numpy_tensors() -> dict[str, np.ndarray]:
    return {
        "f64": _RNG.standard_normal((2, 3)),
        "f32": _RNG.standard_normal(5).astype(np.float32),
        "f16": _RNG.standard_normal((3, 1)).astype(np.float16),
        "i64": np.arange(4, dtype=np.int64),
        "i32": np.int32(7) * np.ones((2, 2), np.int32),
        "i16": np.array([-3, 3], np.int16),
        "i8": np.array([-1, 2, 3], np.int8),
        "u8": np.array([255, 0], np.uint8),
        "u16": np.array([65535], np.uint16),
        "u32": np.array([1, 2], np.uint32),
        "u64": np.array([2**63], np.uint64),
        "bool": np.array([True, False, True]),
        "c64": np.array([1 + 2j], np.complex64),
        "scalar": np.array(1.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }


_UINT = {1: np.uint8, 2: np.int16, 4: np.int32}


def _to_torch(value: np.ndarray) -> object:
    """The torch tensor of the same dtype and bits (torch.from_numpy knows no ml_dtypes)."""
    torch_dtype = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
    bits = torch.from_numpy(np.ascontiguousarray(value).view(_UINT[value.itemsize]))
    return bits.view(torch_dtype.get(value.dtype.name, torch.float32))


def _bits(tensor: object) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


def _write(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    with SafetensorsWriter(path, [(k, v.dtype, v.shape) for k, v in tensors.items()], metadata) as writer:
        for name, value in tensors.items():
            writer.write(name, value)


def test_numpy_dtypes_written_here_are_the_bytes_the_library_writes_and_it_reads_them(tmp_path) -> None:
    tensors = _numpy_tensors()
    ours, theirs = str(tmp_path / "ours.safetensors"), str(tmp_path / "theirs.safetensors")
    _write(ours, tensors, {"format": "pt"})
    np_save(tensors, theirs, metadata={"format": "pt"})
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        assert a.read() == b.read()
    loaded = np_load(ours)
    assert sorted(loaded) == sorted(tensors)
    for name, value in tensors.items():
        assert loaded[name].dtype == value.dtype and np.array_equal(loaded[name], value)


def test_bfloat16_and_float8_round_trip_through_torch(tmp_path) -> None:
    tensors = {
        "bf16": np.array([1.0, -2.5, 3.140625], ml_dtypes.bfloat16),
        "e4m3": np.array([0.5, -448.0], ml_dtypes.float8_e4m3fn),
        "e5m2": np.array([[1.5, 2.0]], ml_dtypes.float8_e5m2),
        "w": np.ones((2, 2), np.float32),
    }
    ours = str(tmp_path / "ours.safetensors")
    _write(ours, tensors)
    loaded = torch_load(ours)
    assert loaded["bf16"].dtype == torch.bfloat16 and loaded["e4m3"].dtype == torch.float8_e4m3fn
    assert loaded["e5m2"].dtype == torch.float8_e5m2
    for name, value in tensors.items():  # compare the bits: torch and numpy disagree on bfloat16 arithmetic
        assert _bits(loaded[name]) == value.tobytes() and tuple(loaded[name].shape) == value.shape
    theirs = str(tmp_path / "theirs.safetensors")
    torch_save({name: _to_torch(value) for name, value in tensors.items()}, theirs)
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        assert a.read() == b.read()
    with SafetensorsFile(theirs) as f:
        for name, value in tensors.items():
            back = f.read(name)
            assert back.dtype == value.dtype and back.tobytes() == value.tobytes()


def test_files_the_library_writes_are_read_here(tmp_path) -> None:
    tensors = _numpy_tensors()
    path = str(tmp_path / "lib.safetensors")
    np_save(tensors, path, metadata={"k": "v"})
    with SafetensorsFile(path) as f:
        assert f.metadata == {"k": "v"}
        assert set(f.tensors) == set(tensors)
        for name, value in tensors.items():
            back = f.read(name, out=np.empty(value.shape, value.dtype))
            assert back.dtype == value.dtype and np.array_equal(back, value)


def test_a_transposed_view_is_written_as_its_transpose(tmp_path) -> None:
    kernel = _RNG.standard_normal((300, 70)).astype(np.float32)
    path = str(tmp_path / "t.safetensors")
    with SafetensorsWriter(path, [("w", kernel.dtype, (70, 300))]) as writer:
        writer.write("w", kernel.T)
    assert np.array_equal(np_load(path)["w"], kernel.T)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    path = str(tmp_path / "m.safetensors")
    _write(path, {"a": np.ones(2, np.float32)})
    before = pathlib.Path(path).read_bytes()
    with pytest.raises(RuntimeError), SafetensorsWriter(path, [("a", np.dtype("f4"), (2,))]) as writer:
        writer.write("a", np.zeros(2, np.float32))
        raise RuntimeError("interrupted")
    with pytest.raises(tp.errors.InvalidArgumentError, match="never written"):
        SafetensorsWriter(path, [("a", np.dtype("f4"), (2,)), ("b", np.dtype("f4"), ())]).finish()
    assert pathlib.Path(path).read_bytes() == before
    assert os.listdir(tmp_path) == ["m.safetensors"]


def test_the_writer_refuses_what_the_plan_does_not_hold(tmp_path) -> None:
    path = str(tmp_path / "m.safetensors")
    with pytest.raises(tp.errors.InvalidArgumentError, match="cannot be stored"):
        SafetensorsWriter(path, [("s", np.dtype(object), ())])
    writer = SafetensorsWriter(path, [("a", np.dtype("f4"), (2,))])
    with pytest.raises(tp.errors.InvalidArgumentError, match="planned as float32"):
        writer.write("a", np.zeros(3, np.float32))
    with pytest.raises(tp.errors.InvalidArgumentError, match="not among the tensors"):
        writer.write("b", np.zeros(2, np.float32))
    writer.abort()
    assert os.listdir(tmp_path) == []


def _raw_file(path: str, header: bytes | dict, data: bytes) -> str:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)
    return path


_F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
HOSTILE = {
    "length_beyond_file": (None, b""),
    "not_json": (b"{not json", b""),
    "not_an_object": (b"[1, 2]", b""),
    "unknown_dtype": ({"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, bytes(16)),
    "size_not_dtype_times_shape": ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)),
    "offsets_out_of_range": ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(8)),
    "offsets_reversed": ({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, bytes(8)),
    "overlapping": ({"w": _F32, "v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
    "gap": ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
    "trailing_bytes": ({"w": _F32}, bytes(12)),
    "negative_dim": ({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8)),
    "duplicate_name": (b'{"w": ' + json.dumps(_F32).encode() + b', "w": ' + json.dumps(_F32).encode() + b"}", bytes(8)),
    "bad_metadata": ({"__metadata__": {"a": 1}, "w": _F32}, bytes(8)),
    "missing_field": ({"w": {"dtype": "F32", "shape": [2]}}, bytes(8)),
    "metadata_not_an_object": ({"__metadata__": [], "w": _F32}, bytes(8)),
    # shapes numpy cannot hold, even for an empty tensor: refused here, not as a raw ValueError later
    "dim_beyond_int64": ({"w": {"dtype": "F32", "shape": [0, 2**70], "data_offsets": [0, 0]}}, b""),
    "empty_but_too_big": ({"w": {"dtype": "F32", "shape": [0, 2**40, 2**40], "data_offsets": [0, 0]}}, b""),
    "bytes_beyond_int64": ({"w": {"dtype": "F64", "shape": [0, 2**61], "data_offsets": [0, 0]}}, b""),
    "rank_100": ({"w": {"dtype": "F32", "shape": [1] * 100, "data_offsets": [0, 4]}}, bytes(4)),
    "deeply_nested": (b'{"w": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b""),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_header_raises_data_loss_naming_the_file(tmp_path, case: str) -> None:
    header, data = HOSTILE[case]
    path = str(tmp_path / f"{case}.safetensors")
    if header is None:
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 1 << 40) + b"{}")
    else:
        _raw_file(path, header, data)
    with pytest.raises(tp.errors.DataLossError) as caught:
        SafetensorsFile(path)
    assert path in str(caught.value) and caught.value.path == path
    named = ("unknown_dtype", "size_not_dtype_times_shape", "offsets_out_of_range", "negative_dim", "rank_100")
    if case in (*named, "dim_beyond_int64", "empty_but_too_big", "bytes_beyond_int64"):
        assert "'w'" in str(caught.value) and caught.value.key == "w"


def test_a_file_cut_short_after_opening_raises_data_loss(tmp_path) -> None:
    path = str(tmp_path / "m.safetensors")
    _write(path, {"w": np.ones(1000, np.float32)})
    with SafetensorsFile(path) as f:
        os.truncate(path, os.path.getsize(path) - 100)
        with pytest.raises(tp.errors.DataLossError, match="'w' is cut short"):
            f.read("w")
    with pytest.raises(tp.errors.DataLossError, match="out of range of the file"):
        SafetensorsFile(path)


def test_a_missing_file_or_tensor_is_not_found(tmp_path) -> None:
    with pytest.raises(tp.errors.NotFoundError):
        SafetensorsFile(str(tmp_path / "nope.safetensors"))
    path = str(tmp_path / "m.safetensors")
    _write(path, {"w": np.ones(1, np.float32)})
    with SafetensorsFile(path) as f, pytest.raises(tp.errors.NotFoundError, match="no tensor 'x'"):
        f.read("x")


def test_raw_pieces_must_add_up_to_the_tensor(tmp_path) -> None:
    path = str(tmp_path / "m.safetensors")
    writer = SafetensorsWriter(path, [("a", np.dtype("f4"), (4,))])
    with pytest.raises(tp.errors.InvalidArgumentError, match="got 8 of its 16 bytes"):
        writer.write_pieces("a", [memoryview(bytes(8))])
    with pytest.raises(tp.errors.InvalidArgumentError, match="got 0 of its 16 bytes"):
        writer.write_pieces("a", [memoryview(bytes(20))])  # a piece past the end is not written
    writer.write_pieces("a", [memoryview(np.arange(2, dtype=np.float32).tobytes())] * 2)
    writer.finish()
    assert np.array_equal(np_load(path)["a"], np.array([0, 1, 0, 1], np.float32))


def test_the_largest_shapes_numpy_holds_are_accepted(tmp_path) -> None:
    rank_64 = {
        "w": {"dtype": "F32", "shape": [1] * 64, "data_offsets": [0, 4]},
        "e": {"dtype": "U8", "shape": [0, 2**62], "data_offsets": [4, 4]},
    }
    with SafetensorsFile(_raw_file(str(tmp_path / "ok.safetensors"), rank_64, bytes(4))) as f:
        assert f.read("w").shape == (1,) * 64 and f.read("e").shape == (0, 2**62)


def _in_thread_or_unblock(fifo: str, call) -> BaseException | None:
    """Run ``call``; if it still blocks after 10 s (on the FIFO), unblock it by opening the FIFO and fail."""
    import threading

    caught: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test, which checks its class
            caught.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # lets the blocked open return
        os.close(fd)
        thread.join(10)
        pytest.fail(f"opening the FIFO {fifo} blocked")
    return caught[0] if caught else None


@pytest.mark.parametrize("how", ["directly", "via_weight_map", "only_candidate_in_directory", "as_the_index"])
def test_a_fifo_source_is_refused_at_once_naming_it(tmp_path, how: str) -> None:
    fifo = tmp_path / ("model.safetensors.index.json" if how == "as_the_index" else "pipe.safetensors")
    os.mkfifo(fifo)
    src = str(fifo)
    if how == "via_weight_map":
        index = tmp_path / "model.safetensors.index.json"
        index.write_text(json.dumps({"weight_map": {"w": "pipe.safetensors"}}))
        src = str(index)
    elif how == "only_candidate_in_directory":
        src = str(tmp_path)
    error = _in_thread_or_unblock(str(fifo), lambda: tp.convert(src, str(tmp_path / "out" / "ckpt")))
    assert isinstance(error, tp.errors.InvalidArgumentError), error
    assert str(fifo) in str(error) and "FIFO" in str(error)
    assert not (tmp_path / "out").exists()


def test_the_writer_refuses_a_header_beyond_the_limit_before_writing(tmp_path, monkeypatch) -> None:
    from trackpoint.tools import _safetensors_writer

    monkeypatch.setattr(_safetensors_writer, "MAX_HEADER_BYTES", 200)
    tensors = [(f"layer{i}.weight", np.dtype(np.float32), (1,)) for i in range(10)]
    assert _safetensors_writer.header_length(tensors) > 200
    with pytest.raises(tp.errors.InvalidArgumentError, match="header would take .* bytes.*fewer tensors"):
        SafetensorsWriter(str(tmp_path / "m.safetensors"), tensors)
    assert list(tmp_path.iterdir()) == []  # not even a temporary file
    SafetensorsWriter(str(tmp_path / "m.safetensors"), tensors[:1]).abort()


def test_no_tensor_may_be_named_like_the_metadata_entry(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="__metadata__"):
        SafetensorsWriter(str(tmp_path / "m.safetensors"), [("__metadata__", np.dtype(np.float32), (1,))])
    assert list(tmp_path.iterdir()) == []


def test_rows_of_a_tensor_are_read_in_blocks(tmp_path) -> None:
    value = np.arange(24, dtype=np.int16).reshape(6, 4)
    path = str(tmp_path / "m.safetensors")
    _write(path, {"w": value, "s": np.float32(1)})
    with SafetensorsFile(path) as f:
        assert np.array_equal(f.read_rows("w", 2, np.empty((3, 4), np.int16)), value[2:5])
        assert f.read_rows("w", 6, np.empty((0, 4), np.int16)).shape == (0, 4)
        wrong = [np.empty((1, 3), np.int16), np.empty((1, 4)), np.empty((), np.int16), np.empty((1, 4, 1), np.int16)]
        for start, out in [(4, np.empty((3, 4), np.int16)), *((0, array) for array in wrong)]:
            with pytest.raises(tp.errors.InvalidArgumentError, match="do not fit"):
                f.read_rows("w", start, out)
        with pytest.raises(tp.errors.InvalidArgumentError, match="do not fit"):
            f.read_rows("s", 0, np.empty((1,), np.float32))
        assert np.array_equal(f.read_flat("w", 5, np.empty(6, np.int16)), value.reshape(-1)[5:11])
        assert f.read_flat("s", 0, np.empty(1, np.float32))[0] == 1
        for start, out in [(20, np.empty(5, np.int16)), (0, np.empty((1, 2), np.int16)), (0, np.empty(2))]:
            with pytest.raises(tp.errors.InvalidArgumentError, match="do not fit"):
                f.read_flat("w", start, out)


def test_writeback_is_started_every_8_mib_across_pieces_and_tensors(tmp_path, monkeypatch) -> None:
    """A converted tensor arrives in 1 MiB pieces; each piece used to start its own writeback (a
    ``sync_file_range`` per MiB). The requests now cover 8 MiB of consecutive writes each, across
    tensors, and the file is the same."""
    from trackpoint.tools import _safetensors_writer

    started: list[tuple[int, int]] = []
    monkeypatch.setattr(_safetensors_writer, "start_writeback", lambda fd, offset, size: started.append((offset, size)))
    mib = 1 << 20
    values = {"a": np.arange(5 * mib, dtype=np.uint8), "b": np.arange(15 * mib, dtype=np.uint8) // 7}
    path = str(tmp_path / "model.safetensors")
    with SafetensorsWriter(path, [(n, v.dtype, v.shape) for n, v in values.items()]) as writer:
        for name, value in values.items():
            data = memoryview(value)
            writer.write_pieces(name, (data[i : i + mib] for i in range(0, len(data), mib)))
    # From the header on, two requests of 8 MiB and a little (where a piece crossed the mark); the
    # last 4 MiB are left to the fsync.
    assert len(started) == 2 and started[0][0] == 0 and started[1][0] == started[0][1]
    assert all(8 * mib <= size < 9 * mib for _, size in started)
    loaded = np_load(path)
    assert all(np.array_equal(loaded[n], v) for n, v in values.items())
