"""Readahead: a prefetched tensor is in the page cache before it is read; small ones are left alone.

The page cache is asked directly: ``preadv(..., RWF_NOWAIT)`` reads only what is cached and
fails with EAGAIN otherwise, so these tests observe the kernel's state, not our calls.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format.bundle_reader import BundleReader
from trackpoint.tools.safetensors_format import SafetensorsFile

MiB = 1 << 20


def _drop(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _cached(path: str, offset: int, size: int) -> bool:
    """Whether every page of the range is in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    buffer = bytearray(size)
    try:
        return os.preadv(fd, [buffer], offset, os.RWF_NOWAIT) == size
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _cached_soon(path: str, offset: int, size: int) -> bool:
    deadline = time.monotonic() + 10  # the readahead runs while we wait: a slow disk takes a moment
    while time.monotonic() < deadline:
        if _cached(path, offset, size):
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def page_cache(tmp_path):
    """Skip where the page cache cannot be observed or emptied here (tmpfs keeps its pages)."""
    if not hasattr(os, "RWF_NOWAIT") or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs preadv(RWF_NOWAIT) and posix_fadvise (Linux)")
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * (4 * MiB))
    _drop(str(probe))
    try:
        if _cached(str(probe), 0, 4 * MiB):
            pytest.skip("this file system keeps the pages of a dropped file cached (tmpfs?)")
    except OSError as exc:  # EOPNOTSUPP: no RWF_NOWAIT on this file system
        pytest.skip(f"RWF_NOWAIT unsupported here: {exc}")
    return tmp_path


def test_a_bundle_entry_prefetched_is_cached_before_it_is_read(page_cache) -> None:
    prefix = tp.save_tensors(str(page_cache / "ckpt"), {"large": np.arange(2 * MiB, dtype=np.float32)})
    data = f"{prefix}.data-00000-of-00001"
    with BundleReader(prefix) as bundle:
        large = bundle.entry("large")
        _drop(data)
        assert not _cached(data, large.offset, large.size)
        bundle.prefetch(large)
        assert _cached_soon(data, large.offset, large.size)
        np.testing.assert_array_equal(bundle.read("large"), np.arange(2 * MiB, dtype=np.float32))


def test_a_small_bundle_entry_is_left_to_the_kernels_own_readahead(page_cache) -> None:
    prefix = tp.save_tensors(str(page_cache / "ckpt"), {"small": np.ones(64 << 10, np.float32)})
    data = f"{prefix}.data-00000-of-00001"
    with BundleReader(prefix) as bundle:
        small = bundle.entry("small")
        _drop(data)
        bundle.prefetch(small)  # below readahead.MIN_BYTES: not asked for
        time.sleep(0.2)
        assert not _cached(data, small.offset, small.size)


def test_a_safetensors_tensor_prefetched_is_cached_before_it_is_read(page_cache) -> None:
    source = tp.save_tensors(str(page_cache / "ckpt"), {"w": np.arange(2 * MiB, dtype=np.float32)})
    (path,) = tp.convert(source, str(page_cache / "st"), keys="tf").files
    with SafetensorsFile(path) as opened:
        info = opened.tensors["w"]
        _drop(path)
        assert not _cached(path, info.begin, info.nbytes)
        opened.prefetch("w")
        opened.prefetch("not-there")  # ignored
        assert _cached_soon(path, info.begin, info.nbytes)
