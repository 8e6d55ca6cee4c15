"""A weakly referenced root behaves as in TensorFlow 2.21: same files, and the same failures once it is gone."""

from __future__ import annotations

import filecmp
import gc
import os
import weakref

import pytest

import trackpoint as tp
from tests.interop import structures
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_weak = tf_side("weakref_root")


def test_a_weak_root_writes_the_files_tf_writes(tmp_path) -> None:
    written = {"tf": tf_weak.write_weak_root(str(tmp_path / "tf" / "ckpt"))}
    root, extra = structures.weak_root(tp.Variable, tp.Module)
    written["tp"] = tp.Checkpoint(weakref.ref(root), extra=extra).write(str(tmp_path / "tp" / "ckpt"))
    for suffix in (".index", ".data-00000-of-00001"):
        assert filecmp.cmp(written["tf"] + suffix, written["tp"] + suffix, shallow=False), suffix


def _call(ckpt: object, operation: str, directory: str, path: str) -> object:
    if operation == "save":
        return ckpt.save(os.path.join(directory, "ckpt"))  # type: ignore[attr-defined]
    if operation == "write":
        return ckpt.write(os.path.join(directory, "w"))  # type: ignore[attr-defined]
    return getattr(ckpt, operation)(path)


@pytest.mark.parametrize("operation", ["save", "write", "restore", "read"])
def test_after_the_root_is_gone_both_raise_assertion_error_and_keep_save_counter(tmp_path, operation: str) -> None:
    # TensorFlow's run of the steps below, in the TensorFlow child (tf_side/weakref_root.py).
    theirs = tf_weak.after_the_root_is_gone(str(tmp_path / "tf"), operation)
    assert theirs["gone"]
    assert theirs["raised"] is not None and "AssertionError" in theirs["raised"], theirs["raised"]
    outcome = {"tf": (theirs["weak"], theirs["files"])}

    directory = tmp_path / "tp"
    root, _ = structures.weak_root(tp.Variable, tp.Module)
    ref = weakref.ref(root)
    ckpt = tp.Checkpoint(root=ref)
    path = ckpt.save(str(directory / "ckpt"))
    del root
    gc.collect()
    assert ref() is None
    with pytest.raises(AssertionError):
        _call(ckpt, operation, str(directory), path)
    outcome["tp"] = (
        isinstance(ckpt.root, weakref.ref),
        sorted(f for f in os.listdir(directory) if f.startswith(("ckpt-2", "w."))),
    )
    assert outcome["tp"] == outcome["tf"] == (True, [])
