"""Name-based restore of checkpoints without an object graph (TF1's ``Saver``), beyond what
``tests/interop/test_name_based_tf.py`` compares with TF: all or nothing, slices, restore-on-create,
which restore wins, and the status's account. The files here are written as TF1 lays them out
(``tp.save_tensors``: keys are global names, no object graph)."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format.bundle_writer import BundleWriter
from trackpoint.distributed import ShardedVariable

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def _tf1(path: str, **extra: object) -> str:
    """A TF1-style checkpoint: ``dense/kernel`` (W), its Adam slots, the beta powers, ``global_step``."""
    tensors = {
        "dense/kernel": W,
        "dense/kernel/Adam": W + 100,
        "dense/kernel/Adam_1": W + 200,
        "beta1_power": np.float32(0.5),
        "beta2_power": np.float32(0.25),
        "global_step": np.int64(42),
        **extra,
    }
    return tp.save_tensors(path, tensors)


def test_optimizer_slots_match_tf1_names_however_many_optimizers_this_process_made(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    for _ in range(3):  # their slot variables are named dense/kernel/Adam_2, _3, ... by now
        kernel = tp.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
        tp.optimizers.Adam().apply_gradients([(np.ones((2, 3), np.float32), kernel)])
    kernel = tp.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
    adam = tp.optimizers.Adam()
    adam.apply_gradients([(np.zeros((2, 3), np.float32), kernel)])
    assert adam.get_slot(kernel, "m").name not in ("dense/kernel/Adam", "dense/kernel/Adam_1")
    status = tp.Checkpoint(kernel=kernel, optimizer=adam).restore(prefix)
    status.assert_consumed()
    np.testing.assert_array_equal(adam.get_slot(kernel, "m").numpy(), W + 100)
    np.testing.assert_array_equal(adam.get_slot(kernel, "v").numpy(), W + 200)
    assert adam._lookup_dependency("beta2_power").numpy() == np.float32(0.25)


def test_a_mismatch_restores_nothing_and_names_the_key(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    model = tp.Module()
    model.step = tp.Variable(np.int64(0), name="global_step")
    model.kernel = tp.Variable(np.zeros((3, 2), np.float32), name="dense/kernel")  # transposed
    with pytest.raises(tp.errors.InvalidArgumentError, match="'dense/kernel'.*shape") as caught:
        tp.Checkpoint(model=model).restore(prefix)
    assert caught.value.key == "dense/kernel" and str(tmp_path) in str(caught.value)
    assert int(model.step.numpy()) == 0  # TF would have assigned it before reaching the kernel
    model.kernel = tp.Variable(np.zeros((2, 3), np.float64), name="dense/kernel")  # a dtype mismatch
    with pytest.raises(tp.errors.InvalidArgumentError, match="'dense/kernel'.*float64"):
        tp.Checkpoint(model=model).restore(prefix)
    assert int(model.step.numpy()) == 0
    model.kernel = tp.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
    tp.Checkpoint(model=model).restore(prefix).assert_consumed()
    assert int(model.step.numpy()) == 42


def test_a_partitioned_variable_restores_whole_or_into_blocks(tmp_path) -> None:
    full = np.arange(24, dtype=np.float64).reshape(6, 4)
    prefix = str(tmp_path / "part.ckpt")
    writer = BundleWriter(prefix)  # as TF1 saves a variable partitioned in 3: one key, three slices
    for start in (0, 2, 4):
        writer.add_slice("emb", (6, 4), ((start, 2), (0, -1)), full[start : start + 2])
    writer.add("names", np.array([b"a", b"\x00b"], dtype=object))
    writer.finish()
    whole = tp.Variable(np.zeros((6, 4)), name="emb")
    names = tp.Variable(np.array([b"", b""], dtype=object), name="names")
    tp.Checkpoint(whole=whole, names=names).restore(prefix).assert_consumed()
    np.testing.assert_array_equal(whole.numpy(), full)
    assert names.numpy().tolist() == [b"a", b"\x00b"]
    block = ShardedVariable(np.zeros((3, 4)), full_shape=(6, 4), offsets=(1, 0), name="emb")
    tp.Checkpoint(block=block).restore(prefix).assert_consumed()
    np.testing.assert_array_equal(block.numpy(), full[1:4])


def test_restore_on_create_by_name_refuses_a_misfit_and_waits_for_the_next(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    model = tp.Module()
    status = tp.Checkpoint(model=model).restore(prefix)
    with pytest.raises(tp.errors.InvalidArgumentError, match="dense/kernel"):
        model.kernel = tp.Variable(np.zeros((4,), np.float32), name="dense/kernel")
    assert "kernel" not in model._trackable_children()
    model.kernel = tp.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
    np.testing.assert_array_equal(model.kernel.numpy(), W)
    # A subtree attached later is restored whole (TF 2.21 would restore only its top object).
    block = tp.Module()
    block.step = tp.Variable(np.int64(0), name="global_step")
    model.block = block
    assert int(block.step.numpy()) == 42
    block.later = tp.Variable(np.float32(0), name="beta1_power")  # under the subtree too
    assert block.later.numpy() == np.float32(0.5)
    status.assert_consumed()
    assert set(status.report().matched) == {"dense/kernel", "global_step", "beta1_power"}


def test_the_latest_restore_gives_later_objects_their_values(tmp_path) -> None:
    first = _tf1(str(tmp_path / "a.ckpt"))
    second = _tf1(str(tmp_path / "b.ckpt"), global_step=np.int64(7))
    model = tp.Module()
    ckpt = tp.Checkpoint(model=model)
    ckpt.restore(first)
    ckpt.restore(second)
    model.step = tp.Variable(np.int64(0), name="global_step")
    assert int(model.step.numpy()) == 7
    # An object-based restore after them wins over both for what it holds.
    saved = tp.Module()
    saved.step = tp.Variable(np.int64(99), name="global_step")
    path = tp.Checkpoint(model=saved).write(str(tmp_path / "object_based"))
    fresh = tp.Module()
    ckpt = tp.Checkpoint(model=fresh)
    ckpt.restore(second)
    ckpt.read(path)
    fresh.step = tp.Variable(np.int64(0), name="global_step")
    assert int(fresh.step.numpy()) == 99


def test_the_status_names_what_found_no_value(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))

    class Pair(tp.Trackable):  # values without a global name, as a torch node's
        def _serialize_to_tensors(self):
            return {"a": np.zeros(1), "b": np.zeros(1)}

        def _restore_from_tensors(self, tensors):
            raise AssertionError("a name-based restore has nothing to give it")

    model = tp.Module()
    model.kernel = tp.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
    model.missing = tp.Variable(np.zeros(2), name="dense/bias")
    model.pair = Pair()
    status = tp.Checkpoint(model=model).restore(prefix)
    np.testing.assert_array_equal(model.kernel.numpy(), W)
    for assertion in (status.assert_consumed, status.assert_existing_objects_matched, status.assert_nontrivial_match):
        with pytest.raises(AssertionError, match=r"not restored[^\n]*name-based checkpoint") as caught:
            assertion()
        assert "'dense/bias'" in str(caught.value) and "['a', 'b']" in str(caught.value)
    report = status.report()
    assert report.matched == ("dense/kernel",) and not report.complete
    assert len(report.missing_from_checkpoint) == 2
    assert status.expect_partial() is status and status.initialize_or_restore() is None


def test_slots_made_after_and_skipped_slots(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    kernel = tp.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
    adam = tp.optimizers.Adam()
    adam.apply_gradients([(np.zeros((2, 3), np.float32), kernel)])
    options = tp.CheckpointOptions(experimental_skip_slot_variables=True)
    status = tp.Checkpoint(kernel=kernel, optimizer=adam).restore(prefix, options=options)
    status.assert_consumed()
    assert not adam.get_slot(kernel, "m").numpy().any()  # left alone
    assert adam._lookup_dependency("beta1_power").numpy() == np.float32(0.5)  # not a slot: restored


def test_read_creates_no_save_counter_and_restore_needs_none(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    step = tp.Variable(np.int64(0), name="global_step")
    ckpt = tp.Checkpoint(step=step)
    ckpt.read(prefix).assert_consumed()
    assert ckpt._tp_save_counter is None
    ckpt.restore(prefix).assert_consumed()  # its save_counter, which TF1 never saved, is optional
    assert int(ckpt.save_counter.numpy()) == 0


def test_the_manager_and_the_state_file_lead_to_a_name_based_restore(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt-42"))
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-42"\n')
    step = tp.Variable(np.int64(0), name="global_step")
    manager = tp.CheckpointManager(tp.Checkpoint(step=step), str(tmp_path), max_to_keep=2)
    assert manager.latest_checkpoint == prefix
    assert manager.restore_or_initialize() == prefix
    assert int(step.numpy()) == 42
    step2 = tp.Variable(np.int64(0), name="global_step")
    assert isinstance(tp.Checkpoint(step=step2).restore(str(tmp_path)), tp.NameBasedSaverStatus)
    assert int(step2.numpy()) == 42


def test_files_are_closed_between_reads_and_a_deleted_file_is_named(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    model = tp.Module()
    tp.Checkpoint(model=model).restore(prefix)
    assert not any(str(tmp_path) in path for path in _open_files())
    os.remove(prefix + ".data-00000-of-00001")
    with pytest.raises(tp.errors.NotFoundError, match="data-00000-of-00001"):
        model.step = tp.Variable(np.int64(0), name="global_step")


def _open_files() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the directory listing's own descriptor, closed by now
    return out


def test_warns_once_for_each_checkpoint(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    with caplog.at_level(logging.WARNING, logger="trackpoint"):
        tp.Checkpoint(step=tp.Variable(np.int64(0), name="global_step")).restore(prefix)
        tp.Checkpoint(step=tp.Variable(np.int64(0), name="global_step")).restore(prefix)
    warned = [r for r in caplog.records if "no object graph" in r.getMessage()]
    assert len(warned) == 1 and prefix in warned[0].getMessage()


def test_a_model_waiting_on_restores_can_be_copied_and_pickled(tmp_path) -> None:
    """Every container a name-based restore reached waits on it (as does an object-based
    restore's parent of a missing child); a copy or a pickle leaves those waits behind."""
    import copy
    import pickle

    prefix = _tf1(str(tmp_path / "model.ckpt"))
    saved = tp.Module()
    saved.lost = tp.Variable(np.float32(9))
    object_based = tp.Checkpoint(model=saved).write(str(tmp_path / "object_based"))
    model = tp.Module()
    model.inner = tp.Module()
    model.inner.kernel = tp.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
    tp.Checkpoint(model=model).restore(prefix)
    tp.Checkpoint(model=model.inner).read(object_based).expect_partial()  # inner waits for "lost"
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        np.testing.assert_array_equal(twin.inner.kernel.numpy(), W)
        twin.inner.lost = tp.Variable(np.float32(0))
        twin.step = tp.Variable(np.int64(0), name="global_step")
        assert twin.inner.lost.numpy() == 0 and int(twin.step.numpy()) == 0  # a copy is no restored object
    model.inner.lost = tp.Variable(np.float32(0))
    model.step = tp.Variable(np.int64(0), name="global_step")
    assert model.inner.lost.numpy() == 9 and int(model.step.numpy()) == 42
