"""Repeated restores of one object graph into unchanged objects replay the first walk's bindings.

Each test restores twice (or more) and checks that the later restore does exactly what a
fresh walk would. The ``trackpoint.reuse`` logger tells whether a restore repeated the
previous bindings or walked, and why (the ``reuse`` fixture); tests that change something
between the restores which a replay could not repeat check that it walked, for that reason.
The model is ``helpers.model(shared=True)``: its second path to one object binds once either way.
"""

from __future__ import annotations

import copy
import dataclasses
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.helpers import ReuseLog, build_graph, graph_specs, model, names, variables_of, wrap
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph.coordinator import RestoreCoordinator
from trackpoint._graph.object_graph import read_object_graph
from trackpoint._graph.restore_record import RestoreRecord, replay


def _values(m: tp.Module) -> list[float]:
    return [float(m.dense.kernel.numpy()[0, 0]), float(m.layers[0].numpy()), float(m.layers[1]["bias"].numpy()[0])]


def _two_checkpoints(tmp_path) -> tuple[str, str]:
    """Two checkpoints of one model layout with different values (so: identical graphs)."""
    return (
        tp.Checkpoint(model=model(1.0, shared=True)).write(str(tmp_path / "one")),
        tp.Checkpoint(model=model(2.0, shared=True)).write(str(tmp_path / "two")),
    )


def test_a_replayed_restore_assigns_and_reports_what_a_walk_does(tmp_path, reuse) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = model(0.0, shared=True)
    ckpt = tp.Checkpoint(model=live)
    first = ckpt.read(one)
    assert _values(live) == [1.0, 1.0, 1.0] and reuse.walked()
    reuse.clear()
    second = ckpt.read(two).assert_consumed()
    assert reuse.repeated()
    assert _values(live) == [2.0, 2.0, 2.0]
    assert second.report() == first.report()
    third = ckpt.read(one).assert_consumed()
    assert reuse.repeated() and _values(live) == [1.0, 1.0, 1.0]
    assert third.report() == first.report()
    walked = tp.Checkpoint(model=model(0.0, shared=True)).read(two)  # (new objects: the next restore walks)
    assert second.report() == walked.report()


def test_a_partial_restore_replays_and_still_names_what_is_unmatched(tmp_path, reuse) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = model(0.0, shared=True)
    live.extra = tp.Variable(5.0)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one)
    reuse.clear()
    status = ckpt.read(two)
    assert reuse.repeated() and _values(live) == [2.0, 2.0, 2.0]
    with pytest.raises(AssertionError, match=r"\(root\)\.model\.extra"):
        status.assert_existing_objects_matched()


def test_a_replaced_variable_walks_again_and_gets_the_value(tmp_path, reuse) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = model(0.0, shared=True)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    old_kernel = live.dense.kernel
    live.dense.kernel = tp.Variable(np.zeros((2, 2), np.float32))
    live.shared = live.dense.kernel
    reuse.clear()
    ckpt.read(two).assert_consumed()
    assert reuse.walked("the structure changed since")
    assert live.dense.kernel.numpy()[0, 0] == 2.0 and old_kernel.numpy()[0, 0] == 1.0


def test_objects_built_elsewhere_between_two_restores_leave_the_replay_standing(tmp_path, reuse, caplog) -> None:
    """Another model built between two restores (an evaluator building its metrics, a benchmark
    its fresh copy) changes no object of this one: the second restore repeats the bindings, and
    its status knows every live object bound without walking them."""
    one, two = _two_checkpoints(tmp_path)
    live = model(0.0, shared=True)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    elsewhere = model(5.0, shared=True)  # moves the process-wide epoch
    elsewhere.extra = tp.Variable(1.0)
    reuse.clear()
    with caplog.at_level("DEBUG", logger="trackpoint"):
        ckpt.read(two).assert_consumed()
    assert reuse.repeated() and _values(live) == [2.0, 2.0, 2.0]
    assert not [r for r in caplog.records if "walking the live objects" in r.getMessage()]
    assert _values(elsewhere) == [5.0, 5.0, 5.0]


def test_a_child_added_to_a_bound_object_after_another_model_was_built_walks_again(tmp_path, reuse) -> None:
    """The change that matters is noted on the object that changed, whatever else changed since."""
    one, two = _two_checkpoints(tmp_path)
    live = model(0.0, shared=True)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    model(5.0, shared=True)
    live.layers[1]["extra"] = tp.Variable(np.zeros(2, np.float32))  # a container of this model gains a child
    reuse.clear()
    status = ckpt.read(two)
    assert reuse.walked("the structure changed since") and _values(live) == [2.0, 2.0, 2.0]
    with pytest.raises(AssertionError):
        status.assert_existing_objects_matched()  # the new child is no checkpoint's: a walk finds it


def test_a_checkpoint_with_another_graph_walks_again(tmp_path, reuse) -> None:
    one, _ = _two_checkpoints(tmp_path)
    smaller = tp.Module()
    smaller.dense = tp.Module()
    smaller.dense.kernel = tp.Variable(np.full((2, 2), 3.0, np.float32))
    other = tp.Checkpoint(model=smaller).write(str(tmp_path / "other"))
    live = model(0.0, shared=True)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    reuse.clear()
    status = ckpt.read(other)
    assert reuse.walked("another object graph")
    assert _values(live) == [3.0, 1.0, 1.0]
    with pytest.raises(AssertionError, match=r"not bound to checkpointed values"):
        status.assert_existing_objects_matched()


def test_a_replay_parks_restore_on_create_positions_like_a_walk(tmp_path, reuse) -> None:
    one, two = _two_checkpoints(tmp_path)
    live = tp.Module()
    live.dense = tp.Module()
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).expect_partial()
    reuse.clear()
    status = ckpt.read(two)
    assert reuse.repeated()
    assert status.report().pending == {
        "(root).model.shared": True,
        "(root).model.layers.0": True,
        "(root).model.layers.1.bias": True,
    }
    status.expect_partial()
    live.dense.kernel = tp.Variable(np.zeros((2, 2), np.float32))  # restore-on-create: the latest restore wins
    assert live.dense.kernel.numpy()[0, 0] == 2.0


def test_restore_on_create_after_the_walk_leaves_its_plan_as_it_was(tmp_path) -> None:
    one, _ = _two_checkpoints(tmp_path)
    live = tp.Module()
    live.dense = tp.Module()
    ckpt = tp.Checkpoint(model=live)
    status = ckpt.read(one)
    plan = ckpt._tp_restore_record
    values, deferrals = (list(plan.value_ids), list(plan.value_keys)), list(plan.deferrals)
    live.layers = [tp.Variable(np.float32(0.0)), {"bias": tp.Variable(np.zeros(3))}]  # restored on creation
    assert live.layers[0].numpy() == 1.0
    assert (plan.value_ids, plan.value_keys) == values and plan.deferrals == deferrals
    status.expect_partial()


def test_an_object_naming_its_own_tensors_is_not_replayed(tmp_path, reuse) -> None:
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
    assert reuse.not_kept("node 1 is a Counter, which names its own tensors")
    live.names = ["total"]  # no structural change, but the object no longer takes "count"
    reuse.clear()
    status = ckpt.read(path)
    assert reuse.walked("no previous restore")
    with pytest.raises(AssertionError, match=r"Unused attributes.*count"):
        status.assert_consumed()


def _trained(value: float) -> tp.Checkpoint:
    m = model(value, shared=True)
    opt = tp.optimizers.Adam(0.1)
    opt.apply_gradients([(np.full((2, 2), value, np.float32), m.dense.kernel)])
    return tp.Checkpoint(model=m, optimizer=opt)


def _slots(ckpt: tp.Checkpoint) -> list[np.ndarray]:
    kernel = ckpt.model.dense.kernel
    return [ckpt.optimizer.get_slot(kernel, name).numpy().copy() for name in ("m", "v")]


def _training_checkpoints(tmp_path) -> tuple[str, str, list[np.ndarray]]:
    """Two checkpoints of one training job (one optimizer: identical graphs), and the second's slots."""
    job = _trained(1.0)
    one = job.write(str(tmp_path / "one"))
    job.optimizer.apply_gradients([(np.full((2, 2), 3.0, np.float32), job.model.dense.kernel)])
    return one, job.write(str(tmp_path / "two")), _slots(job)


def _equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_unused_attributes_of_a_variable_are_reported_after_a_replay(tmp_path, reuse) -> None:
    class TwoTensors(tp.Trackable):
        def _serialize_to_tensors(self) -> dict:
            return {"VARIABLE_VALUE": np.float32(6.0), "extra": np.int64(1)}

    path = tp.Checkpoint(v=TwoTensors()).write(str(tmp_path / "c"))
    live = tp.Variable(np.float32(0.0))
    ckpt = tp.Checkpoint(v=live)
    with pytest.raises(AssertionError, match=r"Unused attributes.*\(root\)\.v.*extra"):
        ckpt.read(path).assert_consumed()
    reuse.clear()
    status = ckpt.read(path)
    assert reuse.repeated() and live.numpy() == 6.0
    with pytest.raises(AssertionError, match=r"Unused attributes.*\(root\)\.v.*extra"):
        status.assert_consumed()


def test_slot_variables_are_replayed(tmp_path, reuse) -> None:
    one, two, expected = _training_checkpoints(tmp_path)
    live = _trained(0.5)
    first = live.read(one).assert_consumed()
    assert not _equal(_slots(live), expected)
    reuse.clear()
    second = live.read(two).assert_consumed()
    assert reuse.repeated()
    assert second.report() == first.report()
    assert _equal(_slots(live), expected)


def test_an_evaluator_replays_and_a_later_optimizer_gets_the_latest_slots(tmp_path, reuse) -> None:
    one, two, expected = _training_checkpoints(tmp_path)
    live = tp.Checkpoint(model=model(0.0, shared=True))  # the model only: the optimizer's nodes wait
    live.read(one).expect_partial()
    reuse.clear()
    status = live.read(two)
    assert reuse.repeated()
    with pytest.raises(AssertionError, match="Unresolved object in checkpoint"):
        status.assert_consumed()
    status.assert_existing_objects_matched()
    live.optimizer = tp.optimizers.Adam(0.1)  # restore-on-create, slots included, from the latest restore
    assert _equal(_slots(live), expected)
    status.expect_partial()  # Adam makes its other variables on its first step


def test_skipping_slot_variables_or_not_is_part_of_the_plan(tmp_path, reuse) -> None:
    one, _, _ = _training_checkpoints(tmp_path)
    reference = _trained(0.5)
    reference.read(one).assert_consumed()
    live = _trained(0.5)
    before = _slots(live)
    live.read(one, tp.CheckpointOptions(experimental_skip_slot_variables=True)).assert_consumed()
    assert _equal(_slots(live), before)
    reuse.clear()
    live.read(one).assert_consumed()
    assert reuse.walked()
    assert _equal(_slots(live), _slots(reference))


def test_a_replay_skipping_slots_knows_which_nodes_are_slots(tmp_path, reuse) -> None:
    """The plan carries the graph's slot owners: a replay, which scans for none, still tells
    skipped slot values from values nobody restored."""
    one, two, _ = _training_checkpoints(tmp_path)
    live = _trained(0.5)
    skip = tp.CheckpointOptions(experimental_skip_slot_variables=True)
    live.read(one, skip).assert_consumed()
    reuse.clear()
    status = live.read(two, skip)
    assert reuse.repeated()
    status.assert_consumed()
    assert status.report().complete


def test_a_replayed_restore_names_a_mismatch_like_a_walk(tmp_path, reuse) -> None:
    one, _ = _two_checkpoints(tmp_path)
    wrong = model(4.0, shared=True)
    wrong.dense.kernel = tp.Variable(np.zeros((3, 3), np.float32))  # the same graph, another shape
    wrong.shared = wrong.dense.kernel
    bad = tp.Checkpoint(model=wrong).write(str(tmp_path / "bad"))
    live = model(0.0, shared=True)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    reuse.clear()
    with pytest.raises(
        tp.errors.InvalidArgumentError,
        match=r"model/shared/\.ATTRIBUTES/VARIABLE_VALUE into \(root\)\.model\.shared: .*"
        r"float32\[2, 2\] but the checkpoint holds float32\[3, 3\]",
    ):
        ckpt.read(bad)
    assert reuse.repeated()
    ckpt.read(one).assert_consumed()
    assert reuse.repeated() and _values(live) == [1.0, 1.0, 1.0]


def _replay_fails_on_shape(ckpt: tp.Checkpoint, bad: str, reuse: ReuseLog) -> None:
    """Read ``bad`` (a float32[3] where the model has float32[2]) by replaying, which fails."""
    reuse.clear()
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"float32\[2\] but the checkpoint holds float32\[3\]"):
        ckpt.read(bad)
    assert reuse.repeated()


def test_a_failed_replay_through_attached_dependencies_stops_where_a_walk_stops(tmp_path, reuse) -> None:
    def source(shape: tuple[int, ...], value: float) -> tp.Checkpoint:
        root, extra = tp.Module(), tp.Module()
        root.a = tp.Variable(np.zeros(shape, np.float32))
        extra.child = tp.Variable(np.float32(value))
        return tp.Checkpoint(root=root, extra=extra)

    good = source((2,), 1.0).write(str(tmp_path / "good"))
    bad = source((3,), 9.0).write(str(tmp_path / "bad"))  # the same graph; the root's variable has another shape
    root, extra = tp.Module(), tp.Module()  # extra.child is restored on creation
    root.a = tp.Variable(np.zeros(2, np.float32))
    ckpt = tp.Checkpoint(root=root, extra=extra)
    ckpt.read(good).expect_partial()
    _replay_fails_on_shape(ckpt, bad, reuse)
    # The root's values failed before the attached dependency was reached, as in a walk: the
    # child created now takes the last good restore's value, not the failed one's.
    extra.child = tp.Variable(np.float32(0.0))
    assert extra.child.numpy() == 1.0


def test_a_failed_replay_leaves_no_slot_waiting_for_an_attached_optimizer_like_a_walk(tmp_path, reuse) -> None:
    source = tp.Module()
    source.k, source.b = tp.Variable(np.ones(2, np.float32)), tp.Variable(np.ones(2, np.float32))
    source_opt = tp.optimizers.Adam(0.1)
    source_opt.apply_gradients([(np.ones(2, np.float32), source.k)])
    job = tp.Checkpoint(root=source, optimizer=source_opt)
    good = job.write(str(tmp_path / "good"))
    source_opt.get_slot(source.k, "m").assign(np.full(2, 77.0, np.float32))
    source.b = tp.Variable(np.ones(3, np.float32))  # the same graph; b has another shape
    bad = job.write(str(tmp_path / "bad"))
    live = tp.Module()
    live.k, live.b = tp.Variable(np.zeros(2, np.float32)), tp.Variable(np.zeros(2, np.float32))
    opt = tp.optimizers.Adam(0.1)
    opt.apply_gradients([(np.ones(2, np.float32), live.k)])
    ckpt = tp.Checkpoint(root=live, optimizer=opt)
    ckpt.read(good).assert_consumed()
    restored_m = opt.get_slot(live.k, "m").numpy().tolist()
    _replay_fails_on_shape(ckpt, bad, reuse)
    # A failed restore assigns nothing and leaves nothing waiting, replayed or walked: the
    # optimizer attached later under the root keeps the slot the good restore gave it.
    live.optimizer = opt
    assert opt.get_slot(live.k, "m").numpy().tolist() == restored_m != [77.0, 77.0]
    fresh = tp.Module()
    fresh.k, fresh.b = tp.Variable(np.zeros(2, np.float32)), tp.Variable(np.zeros(2, np.float32))
    fresh_opt = tp.optimizers.Adam(0.1)
    fresh_opt.apply_gradients([(np.ones(2, np.float32), fresh.k)])
    with pytest.raises(tp.errors.InvalidArgumentError):
        tp.Checkpoint(root=fresh, optimizer=fresh_opt).read(bad)  # a walk
    fresh.optimizer = fresh_opt
    assert opt.get_slot(live.k, "m").numpy().tolist() == fresh_opt.get_slot(fresh.k, "m").numpy().tolist()


def test_slots_resolved_by_a_later_stage_leave_nothing_waiting(tmp_path, reuse) -> None:
    live = model(0.0, shared=True)
    opt = tp.optimizers.Adam(0.1)
    opt.apply_gradients([(np.ones((2, 2), np.float32), live.dense.kernel)])
    root_ckpt = tp.Checkpoint(root=tp.Module(), model=live, optimizer=opt)  # the optimizer: an attached stage
    path = root_ckpt.write(str(tmp_path / "attached"))
    walked = root_ckpt.read(path)
    reuse.clear()
    replayed = root_ckpt.read(path)
    assert reuse.repeated()
    # The model's stage parks its slots for the optimizer, whose stage takes them: nothing
    # stays waiting (and no variable stays referenced by the restore), as after the walk.
    assert walked._coordinator.deferred_slot_restorations == {}
    assert replayed._coordinator.deferred_slot_restorations == {}
    assert replayed.report() == walked.report()
    replayed.assert_consumed()


def test_a_copied_checkpoint_does_not_replay_into_the_original(tmp_path, reuse) -> None:
    source = tp.Module()
    source.w = tp.Variable(np.full(2, 5.0, np.float32))
    path = tp.Checkpoint(model=source).write(str(tmp_path / "c"))
    live = tp.Module()
    live.w = tp.Variable(np.zeros(2, np.float32))
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(path).assert_consumed()
    live.w.assign(np.zeros(2, np.float32))
    twin = copy.deepcopy(ckpt)  # copies the objects without a structural change
    reuse.clear()
    twin.read(path).assert_consumed()
    assert reuse.walked()
    assert twin.model.w.numpy().tolist() == [5.0, 5.0] and live.w.numpy().tolist() == [0.0, 0.0]


def test_objects_with_their_own_equality_are_replayed(tmp_path, reuse) -> None:
    class Layer(tp.Module):
        def __init__(self, units: int) -> None:
            super().__init__()
            self.units = units
            self.kernel = tp.Variable(np.zeros(units, np.float32))

        def __eq__(self, other: object) -> bool:  # a configuration's equality, which None does not have
            return self.units == other.units  # type: ignore[attr-defined]

        __hash__ = object.__hash__

    source = tp.Module()
    source.layer = Layer(2)
    source.layer.kernel.assign([1.0, 2.0])
    path = tp.Checkpoint(model=source).write(str(tmp_path / "c"))
    live = tp.Module()
    live.layer = Layer(2)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(path).assert_consumed()
    reuse.clear()
    ckpt.read(path).assert_consumed()
    assert reuse.repeated() and live.layer.kernel.numpy().tolist() == [1.0, 2.0]


def test_an_object_finding_children_its_own_way_is_not_replayed(tmp_path, reuse) -> None:
    class Aliases(tp.Module):
        """Checkpoint name "w" is whichever tracked variable the plain attribute ``active`` names."""

        def _lookup_dependency(self, name: str) -> tp.Trackable | None:
            return super()._lookup_dependency(self.active if name == "w" else name)

    source = tp.Module()
    source.w = tp.Variable(np.float32(5.0))
    path = tp.Checkpoint(model=source).write(str(tmp_path / "c"))
    live = Aliases()
    live.a, live.b = tp.Variable(np.float32(0.0)), tp.Variable(np.float32(0.0))
    live.active = "a"
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(path).expect_partial()
    assert reuse.not_kept("Aliases finds its children its own way (_lookup_dependency)")
    live.active = "b"  # no structural change, yet "w" is now another object
    reuse.clear()
    ckpt.read(path).expect_partial()
    assert reuse.walked("no previous restore")
    assert live.b.numpy() == 5.0


def test_a_plan_whose_object_died_binds_nothing(tmp_path) -> None:
    one, _ = _two_checkpoints(tmp_path)
    live = model(0.0, shared=True)
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(one).assert_consumed()
    plan = ckpt._tp_restore_record
    assert isinstance(plan, RestoreRecord) and plan.refusal(plan.graph, False, ckpt) is None

    class Gone(tp.Trackable):
        pass

    dead = weakref.ref(Gone())
    stale = dataclasses.replace(plan, bound={**plan.bound, max(plan.bound) + 1: dead})
    reader = BundleReader(one)
    coordinator = RestoreCoordinator(reader, read_object_graph(reader, validate=False))
    assert not replay(coordinator, stale)
    assert coordinator.bound == {} and not coordinator.matched.any()
    coordinator.silence()


@pytest.mark.slow  # a differential test over random graphs (hypothesis): seconds
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.dictionaries(
        names.filter(lambda n: n.isidentifier() and n != "root"), graph_specs(3), min_size=1, max_size=4
    ),
    keep=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_random_graphs_replay_like_a_walk(tmp_path_factory, reuse, spec: dict, keep: list[bool]) -> None:
    directory = tmp_path_factory.mktemp("r")
    source = tp.Checkpoint(**{name: wrap(build_graph(child, [0], False)) for name, child in spec.items()})
    one = source.write(str(directory / "one"))
    for _, variable in variables_of(source):
        variable.assign(variable.numpy() + 100)
    two = source.write(str(directory / "two"))
    kept = {
        name: child for (name, child), k in zip(spec.items(), keep, strict=False) if k
    }  # the rest: restore-on-create

    def target() -> tp.Checkpoint:
        return tp.Checkpoint(**{name: wrap(build_graph(child, [0], True)) for name, child in kept.items()})

    walked_ckpt = target()
    walked = walked_ckpt.read(two).expect_partial()
    live = target()
    live.read(one).expect_partial()
    reuse.clear()
    replayed = live.read(two).expect_partial()
    assert reuse.repeated()
    assert replayed.report() == walked.report()
    for name, child in spec.items():
        if name not in kept:
            setattr(live, name, wrap(build_graph(child, [0], True)))
    expected = {path: v.numpy().tolist() for path, v in variables_of(source)}
    assert {path: v.numpy().tolist() for path, v in variables_of(live)} == expected


def _pair(tmp_path, name: str, value: float) -> str:
    """A checkpoint of a module with two float32[4] variables, ``name`` and ``y``."""
    m = tp.Module()
    setattr(m, name, tp.Variable(np.full(4, value, np.float32)))
    m.y = tp.Variable(np.full(4, value + 1, np.float32))
    return tp.Checkpoint(model=m).write(str(tmp_path / f"{name}-{value}"))


def _restored(prefix: str) -> tuple[tp.Module, tp.Checkpoint]:
    """A module of ``x`` and ``y``, float32[4], and its checkpoint, which restored ``prefix`` once."""
    live = tp.Module()
    live.x = tp.Variable(np.zeros(4, np.float32))
    live.y = tp.Variable(np.zeros(4, np.float32))
    ckpt = tp.Checkpoint(model=live)
    ckpt.read(prefix).assert_consumed()
    return live, ckpt


def test_a_graph_of_the_last_ones_size_with_other_names_is_compared_before_any_value_is_taken(tmp_path, reuse) -> None:
    """A repeat reads the values before the graph (which a writer puts after them) when the
    graph's entry is the size of the last restore's. Here it is another graph of that size (x
    renamed z): the repeat's reads fail, the graph is compared, and the restore walks instead,
    as a walk would have from the start."""
    first, other = _pair(tmp_path, "x", 1.0), _pair(tmp_path, "z", 5.0)
    key = "_CHECKPOINTABLE_OBJECT_GRAPH"
    with BundleReader(first) as a, BundleReader(other) as b:
        assert a.entry(key).size == b.entry(key).size  # the case under test
    live, ckpt = _restored(first)
    reuse.clear()
    status = ckpt.read(other)
    assert reuse.walked("not the one the previous restore's bindings were made from")
    assert float(live.x.numpy()[0]) == 1.0 and float(live.y.numpy()[0]) == 6.0
    with pytest.raises(AssertionError, match=r"not bound to checkpointed values"):
        status.assert_existing_objects_matched()
    reuse.clear()
    ckpt.read(other).expect_partial()  # the walk's record now: repeated
    assert reuse.repeated() and float(live.y.numpy()[0]) == 6.0


def test_a_graph_that_differs_only_in_order_is_compared_once_the_values_are_read(tmp_path, reuse) -> None:
    """The same keys under another graph of the same size (the children added in the other
    order): the repeat reads every value, compares the graph before any object takes one, finds
    it changed, and walks."""

    def saved(order: str, value: float) -> str:
        m = tp.Module()
        for offset, name in enumerate(order):
            setattr(m, name, tp.Variable(np.full(4, value + offset, np.float32)))
        return tp.Checkpoint(model=m).write(str(tmp_path / f"{order}-{value}"))

    first, other = saved("xy", 1.0), saved("yx", 5.0)
    from trackpoint._graph.object_graph import read_object_graph_bytes

    with BundleReader(first) as a, BundleReader(other) as b:
        assert len(read_object_graph_bytes(a) or b"") == len(read_object_graph_bytes(b) or b"")
        assert read_object_graph_bytes(a) != read_object_graph_bytes(b)  # the case under test
    live, ckpt = _restored(first)
    reuse.clear()
    ckpt.read(other).assert_consumed()
    assert reuse.walked("not the one the previous restore's bindings were made from")
    assert float(live.y.numpy()[0]) == 5.0 and float(live.x.numpy()[0]) == 6.0
