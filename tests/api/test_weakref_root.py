"""``tp.Checkpoint(root=weakref.ref(obj))`` holds only the weak reference, as TF does."""

from __future__ import annotations

import filecmp
import gc
import weakref

import numpy as np
import pytest

import trackpoint as tp


def _model(value: float = 1.0) -> tp.Module:
    # Not helpers.model: a test rebuilds this layout one attribute at a time (restore on create), which
    # a flat layout with one nested module keeps short.
    model = tp.Module()
    model.v = tp.Variable(np.full(3, value, np.float32))
    model.inner = tp.Module()
    model.inner.w = tp.Variable(value + 1)
    return model


def test_a_weak_root_saves_and_restores_like_the_object_itself(tmp_path) -> None:
    model = _model()
    extra = tp.Variable(7)
    weak = tp.Checkpoint(root=weakref.ref(model), extra=extra)
    strong = tp.Checkpoint(model, extra=extra)
    assert type(weak.root) is weakref.ref and weak.root() is model  # as TF: ckpt.root is the reference
    weak.write(str(tmp_path / "weak"))
    strong.write(str(tmp_path / "strong"))
    for suffix in (".index", ".data-00000-of-00001"):
        assert filecmp.cmp(tmp_path / f"weak{suffix}", tmp_path / f"strong{suffix}", shallow=False)
    path = weak.save(str(tmp_path / "ckpt"))
    model.v.assign(np.zeros(3, np.float32))
    weak.restore(path).assert_consumed()
    assert model.v.numpy().tolist() == [1.0, 1.0, 1.0]
    assert int(weak.save_counter.numpy()) == 1


def test_the_checkpoint_keeps_neither_the_root_nor_its_variables_alive(tmp_path, no_gc, reuse) -> None:
    model = _model()
    ckpt = tp.Checkpoint(root=weakref.ref(model))
    path = ckpt.save(str(tmp_path / "ckpt"))
    ckpt.save(str(tmp_path / "ckpt"))  # a second save (with a weak root, no layout is kept to reuse)
    assert reuse.saves()[-2:] == [
        "walking the objects: no previous save of them",
        "the save layout is not kept: it would keep the variables of a weakly held root alive",
    ]
    ckpt.restore(path).assert_consumed()
    ckpt.restore(path).assert_consumed()  # replays the first restore's bindings
    refs = [weakref.ref(model), weakref.ref(model.v), weakref.ref(model.inner.w)]
    del model
    assert [ref() is None for ref in refs] == [True, True, True]
    assert isinstance(ckpt.save_counter, tp.Variable)  # still the checkpoint's own, as in TF


def test_values_wait_on_a_weak_root_for_objects_created_later(tmp_path) -> None:
    source = _model(4.0)
    path = tp.Checkpoint(root=weakref.ref(source)).write(str(tmp_path / "ckpt"))
    target = tp.Module()
    status = tp.Checkpoint(root=weakref.ref(target)).read(path)
    target.v = tp.Variable(np.zeros(3, np.float32))
    target.inner = tp.Module()
    target.inner.w = tp.Variable(0.0)
    status.assert_consumed()
    assert target.v.numpy().tolist() == [4.0, 4.0, 4.0] and target.inner.w.numpy() == 5.0


@pytest.mark.parametrize("operation", ["save", "write", "restore", "read"])
def test_once_the_root_is_gone_saving_and_restoring_raise(tmp_path, operation: str) -> None:
    model = _model()
    ckpt = tp.Checkpoint(root=weakref.ref(model))
    path = ckpt.save(str(tmp_path / "ckpt"))
    del model
    gc.collect()
    call = {
        "save": lambda: ckpt.save(str(tmp_path / "ckpt")),
        "write": lambda: ckpt.write(str(tmp_path / "w")),
        "restore": lambda: ckpt.restore(path),
        "read": lambda: ckpt.read(path),
    }[operation]
    with pytest.raises(tp.errors.DeadReferenceError, match="garbage-collected") as caught:
        call()
    assert isinstance(caught.value, AssertionError)  # what TF raises
    assert isinstance(caught.value, tp.errors.CheckpointError)
    assert int(ckpt.save_counter.numpy()) == 1  # a save that cannot happen uses no number
    assert not (tmp_path / "w.index").exists() and not (tmp_path / "ckpt-2.index").exists()


def test_a_weak_reference_that_is_already_dead_or_not_trackable_is_rejected() -> None:
    class Plain:
        pass

    gone = tp.Module()
    dead = weakref.ref(gone)
    del gone
    gc.collect()
    with pytest.raises(tp.errors.InvalidArgumentError, match="expecting root to be a trackable object.*gone"):
        tp.Checkpoint(root=dead)
    plain = Plain()
    with pytest.raises(tp.errors.InvalidArgumentError, match="expecting root to be a trackable object"):
        tp.Checkpoint(root=weakref.ref(plain))


def test_a_weak_root_with_a_child_of_a_keyword_name_is_rejected_as_a_strong_one() -> None:
    model = _model()
    with pytest.raises(tp.errors.InvalidArgumentError, match="root.v already exists"):
        tp.Checkpoint(root=weakref.ref(model), v=tp.Variable(0.0))


def test_a_manager_of_a_checkpoint_whose_weak_root_is_gone_raises_without_using_a_number(tmp_path) -> None:
    model = _model()
    manager = tp.CheckpointManager(tp.Checkpoint(root=weakref.ref(model)), str(tmp_path), max_to_keep=2)
    assert manager.save().endswith("ckpt-1")
    del model
    gc.collect()
    with pytest.raises(tp.errors.DeadReferenceError):
        manager.save()
    assert int(manager.checkpoint.save_counter.numpy()) == 1
    assert [path.rsplit("/", 1)[1] for path in manager.checkpoints] == ["ckpt-1"]
