"""A real full disk: every save raises ``WriteError`` naming the path and the remedy, leaves no
temporary file behind, and the checkpoint saved before still restores.

The disk is a small tmpfs mounted for each test (mounting needs root: skipped otherwise). A
mock could not show what matters here: that the kernel's ENOSPC met while flushing a data file
does not also stop its removal.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import mounted_tmpfs

_VALUES = np.arange(256, dtype=np.float32)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A directory on a real 256 KiB tmpfs, unmounted after the test."""
    with mounted_tmpfs(tmp_path / "fs", "256k") as mount:
        yield mount


def _fill(directory: Path, leave: int) -> None:
    """Fill the file system, then free ``leave`` bytes again (so a save may begin, then fail)."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: no flush at close meets ENOSPC again
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))


def _checkpoint() -> tp.Checkpoint:
    model = tp.Module()
    model.w = tp.Variable(_VALUES)
    # Many small tensors (all of them held in the write buffer until the data file is flushed)
    # and one of 64 KiB, larger than the space left when the disk is nearly full.
    model.small = [tp.Variable(np.full(4, i, np.float32)) for i in range(50)]
    model.large = tp.Variable(np.ones(16384, np.float32))
    return tp.Checkpoint(model=model)


def _restores(prefix: str) -> None:
    model = tp.Module()
    model.w = tp.Variable(np.zeros_like(_VALUES))
    tp.Checkpoint(model=model).restore(prefix).expect_partial()
    np.testing.assert_array_equal(model.w.numpy(), _VALUES)


_HUGE = np.ones(600_000, np.float32)  # larger than the file system and than the 1 MiB write buffer


def _save_functions(huge: bool) -> dict[str, Callable[[Path, tp.Checkpoint, str], str]]:
    added = {"model/huge": _HUGE} if huge else {}
    return {
        "Checkpoint.write": lambda d, ckpt, src: ckpt.write(str(d / "written")),
        "Checkpoint.save": lambda d, ckpt, src: ckpt.save(str(d / "saved")),
        "CheckpointManager.save": lambda d, ckpt, src: tp.CheckpointManager(ckpt, str(d), max_to_keep=3).save(),
        "rewrite": lambda d, ckpt, src: tp.rewrite(
            src, str(d / "rewritten"), rename={"model/large": "model/big"}, add=added
        ),
    }


@pytest.mark.parametrize(
    ("leave", "huge"),
    [(0, False), (16384, False), (16384, True)],
    # Buffered small tensors fail at the flush before the index; a tensor larger than the
    # buffer fails while it is added, with small ones still buffered in front of it.
    ids=["full", "nearly-full", "larger-than-the-buffer"],
)
@pytest.mark.parametrize("save", list(_save_functions(False)))
def test_a_save_on_a_full_disk_leaves_nothing_behind(small_fs: Path, save: str, leave: int, huge: bool) -> None:
    ckpt = _checkpoint()
    manager = tp.CheckpointManager(ckpt, str(small_fs), max_to_keep=3)
    previous = manager.save()
    if huge:
        ckpt.model.huge = tp.Variable(_HUGE)  # type: ignore[attr-defined]
    _fill(small_fs, leave)
    before = sorted(os.listdir(small_fs))
    with pytest.raises(tp.errors.WriteError) as caught:
        _save_functions(huge)[save](small_fs, ckpt, previous)
    message = str(caught.value)
    assert "No space left on device" in message
    assert "Free disk space" in message and "another directory" in message, message
    assert caught.value.path is not None and caught.value.path.startswith(str(small_fs))
    assert caught.value.path in message
    assert sorted(os.listdir(small_fs)) == before  # no .tp-tmp- file holds the space
    _restores(previous)
    assert tp.latest_checkpoint(str(small_fs)) == previous
    if not huge:  # once space is freed, the same save succeeds: nothing of the failed one is in its way
        os.unlink(small_fs / "filler")
        _restores(_save_functions(huge)[save](small_fs, ckpt, previous))
