"""Replaced and deleted files: gone from view at once, freed on a helper thread, no descriptor kept."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage import atomic

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _wait_for_releases() -> None:
    for thread in threading.enumerate():
        if thread.name == "trackpoint-release":
            thread.join()


def test_overwriting_and_deleting_release_every_descriptor(tmp_path) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(np.arange(100_000, dtype=np.float32)))
    prefix = str(tmp_path / "ckpt")
    ckpt.write(prefix)
    _wait_for_releases()
    before = _open_fds()
    data = tmp_path / "ckpt.data-00000-of-00001"
    old_inode = data.stat().st_ino
    ckpt.write(prefix)  # replaces both files, holding the old ones open until the helper closes them
    assert data.stat().st_ino != old_inode
    _wait_for_releases()
    assert _open_fds() == before
    atomic.remove([str(tmp_path / "ckpt.index"), str(data), str(tmp_path / "missing")])
    assert sorted(os.listdir(tmp_path)) == []
    _wait_for_releases()
    assert _open_fds() == before
