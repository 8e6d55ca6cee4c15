"""One loop over short reads (``_format/pread.py``): every read of stored bytes goes through it.

``os.pread``/``os.preadv`` may return fewer bytes than asked. The package reads files with them
in one module only, so that a read returning a few bytes at a time is always completed, and a
file that ends early always raises the caller's error naming the file, never a short buffer.
"""

from __future__ import annotations

import ast
import os
import pathlib

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format import pread
from trackpoint._format.bundle_reader import BundleReader
from trackpoint.errors import DataLossError
from trackpoint.tools._safetensors_format import SafetensorsFile
from trackpoint.tools._safetensors_writer import SafetensorsWriter

SRC = pathlib.Path(tp.__file__).parent


def _calls_pread(path: pathlib.Path) -> list[int]:
    """Lines of ``path`` that call ``os.pread``/``os.preadv`` (or read ``readinto`` from a file)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("pread", "preadv", "readinto"):
            lines.append(node.lineno)
    return lines


def test_only_the_pread_module_calls_pread() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "pread.py" and (lines := _calls_pread(path))
    }
    assert found == {}, f"read through trackpoint._format.pread instead: {found}"


@pytest.fixture
def trickle(monkeypatch):
    """os.pread and os.preadv return at most 3 bytes per call, as a slow network file system may."""
    real_pread, real_preadv = os.pread, os.preadv
    calls = []

    def short_pread(fd: int, length: int, offset: int) -> bytes:
        calls.append(offset)
        return real_pread(fd, min(length, 3), offset)

    def short_preadv(fd: int, buffers: list, offset: int) -> int:
        calls.append(offset)
        return real_preadv(fd, [memoryview(buffers[0])[:3]], offset)

    monkeypatch.setattr(os, "pread", short_pread)
    monkeypatch.setattr(os, "preadv", short_preadv)
    return calls


def test_reads_that_return_a_few_bytes_at_a_time_are_completed(tmp_path, trickle) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(range(40)))
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = memoryview(bytearray(10))
        pread.read_into(fd, buf, 5, lambda at: AssertionError(at))
        assert bytes(buf) == bytes(range(5, 15))
        parts = [memoryview(bytearray(4)), memoryview(bytearray(7))]
        pread.read_into_all(fd, parts, 20, lambda at: AssertionError(at))
        assert bytes(parts[0]) + bytes(parts[1]) == bytes(range(20, 31))
        assert pread.read_bytes(fd, 8, 30, lambda at: AssertionError(at)) == bytes(range(30, 38))
        with pytest.raises(DataLossError, match="ends at 40"):
            pread.read_into_all(fd, [memoryview(bytearray(5))] * 2, 32, lambda at: DataLossError(f"ends at {at}"))
    finally:
        os.close(fd)
    assert len(trickle) > 10


def test_a_checkpoint_and_a_safetensors_file_read_a_few_bytes_at_a_time(tmp_path, monkeypatch) -> None:
    tensors = {f"t{i}": np.arange(i, i + 50, dtype=np.float32) for i in range(4)}
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), tensors)
    path = str(tmp_path / "m.safetensors")
    with SafetensorsWriter(path, [(k, v.dtype, v.shape) for k, v in tensors.items()]) as writer:
        for name, value in tensors.items():
            writer.write(name, value)
    real_preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset: real_preadv(fd, [memoryview(buffers[0])[:3]], offset))
    with BundleReader(prefix) as reader:
        for key, value in tensors.items():
            np.testing.assert_array_equal(reader.read(key), value)
    with SafetensorsFile(path) as file:
        np.testing.assert_array_equal(file.read("t3"), tensors["t3"])


def test_a_data_file_cut_short_raises_naming_the_file_and_key(tmp_path) -> None:
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.ones(1000, np.float64)})
    data = f"{prefix}.data-00000-of-00001"
    with BundleReader(prefix) as reader:
        entry = reader.entry("w")
        reader.checked(entry)  # before the cut: the entry lies inside the file as it was opened
        os.truncate(data, 4000)
        with pytest.raises(DataLossError, match="unexpected end of file reading key 'w'") as raised:
            reader.read_checked(entry, entry.dtype)  # type: ignore[arg-type]
    assert raised.value.path == data and raised.value.key == "w"
