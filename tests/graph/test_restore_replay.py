"""Repeated restores of one object graph into unchanged objects replay the first walk's bindings.

Each test restores twice (or more) and checks that the later restore does exactly what a
fresh walk would; the ones named ``..._walks_again`` change something between the restores
that a replay could not repeat.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph import restore
from trackpoint._graph.restore import CheckpointPosition, RestoreReplay


def _model(value: float) -> tp.Module:
    m = tp.Module()
    m.dense = tp.Module()
    m.dense.kernel = tp.Variable(np.full((2, 2), value, np.float32))
    m.layers = [tp.Variable(np.float32(value)), {"bias": tp.Variable(np.full(3, value))}]
    m.shared = m.dense.kernel  # a second path to one object
    return m


def _values(m: tp.Module) -> list[float]:
    return [float(m.dense.kernel.numpy()[0, 0]), float(m.layers[0].numpy()), float(m.layers[1]["bias"].numpy()[0])]


@pytest.fixture
def walks(monkeypatch) -> list[int]:
    """Counts graph walks (a replay does none)."""
    calls: list[int] = []
    original = CheckpointPosition._restore_descendants

    def counting(self: CheckpointPosition, trackable: tp.Trackable) -> None:
        calls.append(self.proto_id)
        original(self, trackable)

    monkeypatch.setattr(CheckpointPosition, "_restore_descendants", counting)
    return calls


def _two_checkpoints(tmp_path) -> tuple[str, str]:
    """Two checkpoints of one model layout with different values (so: identical graphs)."""
    return (tp.Checkpoint(model=_model(1.0)).write(str(tmp_path / "one")),
            tp.Checkpoint(model=_model(2.0)).write(str(tmp_path / "two")))


def test_a_replayed_restore_assigns_and_reports_what_a_walk_does(tmp_path, walks) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = _model(0.0)
    ckpt = tp.Checkpoint(model=live)
    first = ckpt.read(one)
    assert _values(live) == [1.0, 1.0, 1.0] and walks
    walks.clear()
    second = ckpt.read(two).assert_consumed()
    assert walks == []  # replayed
    assert _values(live) == [2.0, 2.0, 2.0]
    assert second.report() == first.report()
    third = ckpt.read(one).assert_consumed()
    assert walks == [] and _values(live) == [1.0, 1.0, 1.0]
    assert third.report() == first.report()
    walked = tp.Checkpoint(model=_model(0.0)).read(two)  # (new objects: the next restore walks)
    assert second.report() == walked.report()


def test_a_partial_restore_replays_and_still_names_what_is_unmatched(tmp_path, walks) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = _model(0.0)
    live.extra = tp.Variable(5.0)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one)
    walks.clear()
    status = ckpt.read(two)
    assert walks == [] and _values(live) == [2.0, 2.0, 2.0]
    with pytest.raises(AssertionError, match=r"\(root\)\.model\.extra"):
        status.assert_existing_objects_matched()


def test_a_replaced_variable_walks_again_and_gets_the_value(tmp_path, walks) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = _model(0.0)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    old_kernel = live.dense.kernel
    live.dense.kernel = tp.Variable(np.zeros((2, 2), np.float32))
    live.shared = live.dense.kernel
    walks.clear()
    ckpt.read(two).assert_consumed()
    assert walks
    assert live.dense.kernel.numpy()[0, 0] == 2.0 and old_kernel.numpy()[0, 0] == 1.0


def test_a_checkpoint_with_another_graph_walks_again(tmp_path, walks) -> None:
    one, _ = _two_checkpoints(tmp_path)
    smaller = tp.Module()
    smaller.dense = tp.Module()
    smaller.dense.kernel = tp.Variable(np.full((2, 2), 3.0, np.float32))
    other = tp.Checkpoint(model=smaller).write(str(tmp_path / "other"))
    live = _model(0.0)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    walks.clear()
    status = ckpt.read(other)
    assert walks
    assert _values(live) == [3.0, 1.0, 1.0]
    with pytest.raises(AssertionError, match=r"not bound to checkpointed values"):
        status.assert_existing_objects_matched()


def test_a_restore_that_deferred_values_is_not_replayed(tmp_path, walks) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = tp.Module()
    live.dense = tp.Module()
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).expect_partial()
    walks.clear()
    ckpt.read(two).expect_partial()
    assert walks
    live.dense.kernel = tp.Variable(np.zeros((2, 2), np.float32))  # restore-on-create: the latest restore wins
    assert live.dense.kernel.numpy()[0, 0] == 2.0


def test_an_object_naming_its_own_tensors_is_not_replayed(tmp_path, walks) -> None:
    class Counter(tp.Trackable):
        def __init__(self) -> None:
            self.names = ["count"]
            self.count = np.int64(0)

        def _serialize_to_tensors(self) -> dict:
            return {name: self.count for name in self.names}

        def _restore_from_tensors(self, tensors: dict) -> None:
            self.count = tensors["count"]

    source = Counter()
    source.count = np.int64(7)
    path = tp.Checkpoint(counter=source).write(str(tmp_path / "c"))
    live = Counter()
    ckpt = tp.Checkpoint(counter=live)
    ckpt.read(path).assert_consumed()
    assert live.count == 7
    live.names = ["total"]  # no structural change, but the object no longer takes "count"
    walks.clear()
    status = ckpt.read(path)
    assert walks
    with pytest.raises(AssertionError, match=r"Unused attributes.*count"):
        status.assert_consumed()


def test_slot_variables_are_restored_by_a_walk_every_time(tmp_path, walks) -> None:
    def trained(value: float) -> tp.Checkpoint:
        m = _model(value)
        opt = tp.optimizers.Adam(0.1)
        opt.apply_gradients([(np.full((2, 2), value, np.float32), m.dense.kernel)])
        return tp.Checkpoint(model=m, optimizer=opt)

    one = trained(1.0).write(str(tmp_path / "one"))
    two = trained(2.0).write(str(tmp_path / "two"))
    live = trained(0.5)
    live.read(one).assert_consumed()
    walks.clear()
    live.read(two).assert_consumed()
    assert walks
    reference = trained(2.0)
    slot = live.optimizer.get_slot(live.model.dense.kernel, "m").numpy()
    assert np.array_equal(slot, reference.optimizer.get_slot(reference.model.dense.kernel, "m").numpy())


def test_a_replayed_restore_names_a_mismatch_like_a_walk(tmp_path, walks) -> None:
    one, _ = _two_checkpoints(tmp_path)
    wrong = _model(4.0)
    wrong.dense.kernel = tp.Variable(np.zeros((3, 3), np.float32))  # the same graph, another shape
    wrong.shared = wrong.dense.kernel
    bad = tp.Checkpoint(model=wrong).write(str(tmp_path / "bad"))
    live = _model(0.0)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    walks.clear()
    with pytest.raises(tp.errors.InvalidArgumentError,
                       match=r"model/shared/\.ATTRIBUTES/VARIABLE_VALUE into \(root\)\.model\.shared: .*"
                             r"float32\[2, 2\] but the checkpoint holds float32\[3, 3\]"):
        ckpt.read(bad)
    assert walks == []
    ckpt.read(one).assert_consumed()
    assert walks == [] and _values(live) == [1.0, 1.0, 1.0]


def test_a_plan_whose_object_died_binds_nothing(tmp_path) -> None:
    one, _ = _two_checkpoints(tmp_path)
    live = _model(0.0)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    plan = ckpt._tp_restore_replay
    assert isinstance(plan, RestoreReplay) and plan.applies_to(plan.graph)

    class Gone(tp.Trackable):
        pass

    dead = weakref.ref(Gone())
    stale = RestoreReplay(plan.epoch, plan.graph, {**plan.bound, max(plan.bound) + 1: dead}, plan.values)
    reader = BundleReader(one)
    coordinator = restore.RestoreCoordinator(reader, restore.read_object_graph(reader, validate=False))
    assert not coordinator.replay(stale)
    assert coordinator.bound == {} and coordinator.matched_proto_ids == set()
    coordinator.expect_partial = True
