"""Data files written around the page cache (``O_DIRECT``, the writer process's): the same bytes."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from trackpoint._format import direct_file
from trackpoint._format.bundle_writer import ShardWriter
from trackpoint._format.direct_file import CHUNK, DirectFile
from trackpoint._saving.write import write_bundle


@pytest.fixture()
def direct(tmp_path):
    try:
        DirectFile(str(tmp_path / "probe")).close()
    except OSError:
        pytest.skip("this file system refuses O_DIRECT")
    direct_file.write_around_page_cache(True)
    yield
    direct_file.write_around_page_cache(False)


def test_pieces_of_every_size_and_flushes_between_them_give_the_bytes_written(tmp_path, direct) -> None:
    rng = np.random.default_rng(3)
    pieces = [rng.bytes(n) for n in (1, 4095, 4096, 5000, CHUNK - 3, 2 * CHUNK + 17, 10, 0, 123_457)]
    f = DirectFile(str(tmp_path / "data"))
    for i, piece in enumerate(pieces):
        assert f.write(piece) == len(piece)
        if i % 3 == 1:
            f.flush()  # the last block is written padded, cut back, then completed
            assert os.path.getsize(tmp_path / "data") == sum(map(len, pieces[: i + 1]))
    f.close()
    assert (tmp_path / "data").read_bytes() == b"".join(pieces)


def test_a_strided_buffer_is_refused_before_anything_is_written(tmp_path, direct) -> None:
    f = DirectFile(str(tmp_path / "data"))
    f.write(b"abc")
    with pytest.raises(ValueError):
        f.write(np.arange(100.0)[::2])
    f.close()
    assert (tmp_path / "data").read_bytes() == b"abc"


def test_a_file_that_reuses_a_closed_files_buffer_holds_only_its_own_bytes(tmp_path, direct) -> None:
    """Closed files leave their buffer to the next (no 2,048 page faults and an unmap per file);
    the stale bytes it holds are never written past the new file's end."""
    first = DirectFile(str(tmp_path / "first"))
    first.write(b"a" * 10_000)
    first.close()
    spare = direct_file._spare[-1]
    second = DirectFile(str(tmp_path / "second"))
    assert second._buffer is spare
    second.write(b"b" * 100)
    second.flush()  # the padded block holds stale "a"s beyond the 100th byte: cut back
    assert (tmp_path / "second").read_bytes() == b"b" * 100
    second.write(b"c" * 5)
    second.close()
    assert (tmp_path / "second").read_bytes() == b"b" * 100 + b"c" * 5
    assert (tmp_path / "first").read_bytes() == b"a" * 10_000


def test_discard_leaves_what_was_only_gathered_unwritten(tmp_path, direct) -> None:
    f = DirectFile(str(tmp_path / "data"))
    f.write(b"x" * 10)
    f.raw.close()  # what ShardWriter.abort does
    assert f.closed and (tmp_path / "data").read_bytes() == b""


def test_a_bundle_written_around_the_page_cache_is_the_bundle_written_through_it(tmp_path) -> None:
    rng = np.random.default_rng(5)
    tensors = [(f"small/{i}", rng.standard_normal(i % 50 + 1).astype(np.float32)) for i in range(500)]
    tensors += [("large", rng.standard_normal(3 * CHUNK // 8)), ("strings", np.array([b"a", b"bc"], object))]
    tensors += [("strided", np.arange(100.0)[::3]), ("graph", b"\x00graph")]
    # bfloat16 has no buffer format: small ones and a large one (written while checksummed)
    tensors += [("half", np.arange(9).astype(ml_dtypes.bfloat16)), ("big_half", np.ones(3 << 20, ml_dtypes.bfloat16))]
    write_bundle(str(tmp_path / "buffered" / "c"), tensors)
    try:
        DirectFile(str(tmp_path / "probe")).close()
    except OSError:
        pytest.skip("this file system refuses O_DIRECT")
    direct_file.write_around_page_cache(True)
    try:
        shard = ShardWriter(str(tmp_path / "probe-shard"), 0)
        assert isinstance(shard._file, DirectFile)
        shard.abort()
        write_bundle(str(tmp_path / "direct" / "c"), tensors)
    finally:
        direct_file.write_around_page_cache(False)
    for name in sorted(os.listdir(tmp_path / "buffered")):
        assert (tmp_path / "direct" / name).read_bytes() == (tmp_path / "buffered" / name).read_bytes(), name
