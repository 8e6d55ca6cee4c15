"""Readahead: a prefetched tensor is in the page cache before it is read; small ones are left alone.

The page cache is asked directly with ``mincore(2)`` on a mapping that is never touched, so
these tests observe the kernel's state, not our calls. (An earlier probe, a
``preadv(..., RWF_NOWAIT)`` read, was not neutral: a miss starts the kernel's own readahead
of the range, so the probe itself cached what it looked for.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format.bundle_reader import BundleReader
from trackpoint.tools._safetensors_format import SafetensorsFile

MiB = 1 << 20

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_HAS_MINCORE = hasattr(_libc, "mincore") and hasattr(_libc, "mmap")
if _HAS_MINCORE:
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def _resident(path: str, offset: int, size: int) -> list[bool]:
    """For each page of the range, whether it is in the page cache (mapped, never touched: no read starts)."""
    page = mmap.PAGESIZE
    start = offset - offset % page
    length = offset + size - start
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path}")
        try:
            pages = ctypes.create_string_buffer((length + page - 1) // page)
            if _libc.mincore(address, length, pages) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path}")
            return [bool(flags & 1) for flags in pages.raw]
        finally:
            _libc.munmap(address, length)
    finally:
        os.close(fd)


def _cached(path: str, offset: int, size: int) -> bool:
    """Whether every page of the range is in the page cache."""
    return all(_resident(path, offset, size))


def _drop(path: str) -> None:
    """Evict the file from the page cache, and check that it went.

    One ``POSIX_FADV_DONTNEED`` now and then leaves a page behind (one still in a per-CPU
    batch, or under writeback); asking again shortly after takes it.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        size = os.fstat(fd).st_size
        deadline = time.monotonic() + 5
        while True:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if not any(_resident(path, 0, size)):
                return
            assert time.monotonic() < deadline, f"{path}: the kernel kept its pages after 5 s of drops"
            time.sleep(0.05)
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
    if not _HAS_MINCORE or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs mincore and posix_fadvise (Linux)")
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * (4 * MiB))
    fd = os.open(probe, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if _cached(str(probe), 0, 4 * MiB):
        pytest.skip("this file system keeps the pages of a dropped file cached (tmpfs?)")
    return tmp_path


@pytest.mark.slow  # a 48 MiB tensor through the page cache: about a second
def test_a_bundle_entry_prefetched_is_cached_before_it_is_read(page_cache) -> None:
    # 48 MiB: longer than one readahead window anywhere, so every piece has to be asked for
    prefix = tp.save_tensors(str(page_cache / "ckpt"), {"large": np.arange(12 * MiB, dtype=np.float32)})
    data = f"{prefix}.data-00000-of-00001"
    with BundleReader(prefix) as bundle:
        large = bundle.entry("large")
        _drop(data)
        assert not _cached(data, large.offset, large.size)
        bundle.prefetch(large)
        assert _cached_soon(data, large.offset, large.size)
        np.testing.assert_array_equal(bundle.read("large"), np.arange(12 * MiB, dtype=np.float32))


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
