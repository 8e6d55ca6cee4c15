"""A weakly referenced root behaves as in TensorFlow 2.21: same files, and the same failures once it is gone."""

from __future__ import annotations

import filecmp
import gc
import os
import weakref

import pytest
import tensorflow as tf

import trackpoint as tp


def _root(lib: str) -> tuple[object, object]:
    module, variable = (tf.Module, tf.Variable) if lib == "tf" else (tp.Module, tp.Variable)
    root = module()
    root.v = variable([1.0, 2.0])
    root.inner = module()
    root.inner.w = variable(3.0)
    return root, variable(4.0)


def test_a_weak_root_writes_the_files_tf_writes(tmp_path) -> None:
    written = {}
    for lib, checkpoint in (("tf", tf.train.Checkpoint), ("tp", tp.Checkpoint)):
        root, extra = _root(lib)
        written[lib] = checkpoint(weakref.ref(root), extra=extra).write(str(tmp_path / lib / "ckpt"))
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
    outcome = {}
    for lib, checkpoint in (("tf", tf.train.Checkpoint), ("tp", tp.Checkpoint)):
        directory = tmp_path / lib
        root, _ = _root(lib)
        ref = weakref.ref(root)
        ckpt = checkpoint(root=ref)
        path = ckpt.save(str(directory / "ckpt"))
        del root
        gc.collect()
        assert ref() is None
        with pytest.raises(AssertionError):
            _call(ckpt, operation, str(directory), path)
        outcome[lib] = (
            isinstance(ckpt.root, weakref.ref),
            sorted(f for f in os.listdir(directory) if f.startswith(("ckpt-2", "w."))),
        )
    assert outcome["tp"] == outcome["tf"] == (True, [])
