"""assert_existing_objects_matched without a walk of the live objects, when the restore's walk saw them all.

The restore's walk notes whether it bound every live child of every object it expanded
(``Coverage.covered``, ``_graph/coverage.py``); while nothing changes after it, the check trusts
that instead of walking the live objects again (``Coverage.binds_every_live_object``). These tests pin
both halves: the walk is skipped when the restore saw everything, and each thing the restore
did not see sends the check back to the walk, which then fails as before.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.helpers import build_graph, graph_specs, names, wrap
from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._graph import status as status_module


@pytest.fixture
def live_walks(monkeypatch) -> list[int]:
    """Counts the walks of the live objects that assert_existing_objects_matched makes."""
    calls: list[int] = []
    original = status_module._live_by_id

    def counted(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(status_module, "_live_by_id", counted)
    return calls


def _model(value: float = 0.0) -> tp.Module:
    model = tp.Module()
    model.vars = [tp.Variable(np.full(4, value + i, np.float32)) for i in range(6)]
    model.blocks = [tp.Module() for _ in range(2)]
    for block in model.blocks:
        block.kernel = tp.Variable(np.full(3, value, np.float32))
        block.table = {"bias": tp.Variable(np.full(2, value, np.float32))}
        block.pair = (tp.Variable(np.float32(value)), tp.Variable(np.float32(value)))
    model.shared = model.blocks[0].kernel  # one object under two paths
    return model


def _trained(value: float = 0.0) -> tp.Checkpoint:
    model = _model(value)
    optimizer = tp.optimizers.Adam(0.1)
    variables = [*model.vars, *(block.kernel for block in model.blocks)]
    optimizer.apply_gradients([(np.ones_like(v.numpy()), v) for v in variables])
    return tp.Checkpoint(model=model, optimizer=optimizer)


def test_a_complete_restore_and_its_repeats_are_checked_without_walking_the_live_objects(tmp_path, live_walks) -> None:
    source = _trained(1.0)
    prefix = source.write(str(tmp_path / "ckpt"))
    target = _trained()
    for _ in range(3):  # a walk, then repeats of its bindings (restore_record)
        target.read(prefix).assert_consumed()
    assert live_walks == []
    assert target.model.vars[5].numpy().tolist() == source.model.vars[5].numpy().tolist()


def test_a_restore_that_creates_slots_walks_the_live_objects(tmp_path, live_walks) -> None:
    prefix = _trained(1.0).write(str(tmp_path / "ckpt"))
    target = tp.Checkpoint(model=_model(), optimizer=tp.optimizers.Adam(0.1))
    target.read(prefix).assert_existing_objects_matched()  # the optimizer made its slots during the restore
    assert live_walks == [1]


def _must_walk_and_fail(status: tp.CheckpointLoadStatus, live_walks: list[int], unmatched: str) -> None:
    with pytest.raises(AssertionError, match=re.escape(f"unmatched objects: [{unmatched!r}]")):
        status.assert_existing_objects_matched()
    assert live_walks == [1]


def test_a_live_child_the_checkpoint_lacks_is_found_by_the_walk(tmp_path, live_walks) -> None:
    prefix = tp.Checkpoint(model=_model(1.0)).write(str(tmp_path / "ckpt"))
    model = _model()
    model.blocks[1].extra = tp.Variable(np.float32(0))
    _must_walk_and_fail(tp.Checkpoint(model=model).read(prefix), live_walks, "(root).model.blocks.1.extra")


def test_children_of_an_object_the_checkpoint_holds_as_a_leaf_are_found_by_the_walk(tmp_path, live_walks) -> None:
    prefix = tp.Checkpoint(model=_model(1.0)).write(str(tmp_path / "ckpt"))
    model = _model()
    model.vars[2]._track_trackable(tp.Variable(np.float32(0)), "hidden")  # a variable with a child of its own
    _must_walk_and_fail(tp.Checkpoint(model=model).read(prefix), live_walks, "(root).model.vars.2.hidden")


def test_an_object_with_children_the_checkpoint_holds_childless_is_found_by_the_walk(tmp_path, live_walks) -> None:
    source = tp.Module()
    source.inner = tp.Module()
    source.inner.v = tp.Variable(np.float32(1))
    source.empty = tp.Module()
    prefix = tp.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    model = tp.Module()
    model.inner = tp.Module()
    model.inner.v = tp.Variable(np.float32(0))
    model.empty = tp.Module()
    model.empty.late = tp.Variable(np.float32(0))
    _must_walk_and_fail(tp.Checkpoint(model=model).read(prefix), live_walks, "(root).model.empty.late")


def test_a_child_added_after_the_restore_is_found_by_the_walk(tmp_path, live_walks) -> None:
    prefix = tp.Checkpoint(model=_model(1.0)).write(str(tmp_path / "ckpt"))
    model = _model()
    status = tp.Checkpoint(model=model).read(prefix)
    model.blocks[0].table["added"] = tp.Variable(np.float32(0))
    _must_walk_and_fail(status, live_walks, "(root).model.blocks.0.table.added")


def test_a_slot_the_checkpoint_lacks_is_found_by_the_walk(tmp_path, live_walks) -> None:
    prefix = _trained(1.0).write(str(tmp_path / "ckpt"))
    target = _trained()
    extra = tp.Variable(np.float32(0))
    target.model.more = extra
    target.optimizer.apply_gradients([(np.float32(1), extra)])  # slots for a variable the checkpoint lacks
    status = target.read(prefix)
    with pytest.raises(AssertionError, match=re.escape("(root).model.more")):
        status.assert_existing_objects_matched()
    assert live_walks == [1]


def test_a_checkpoint_naming_one_child_twice_does_not_hide_the_other(tmp_path, live_walks) -> None:
    source = tp.Module()
    source.a = tp.Variable(np.float32(1))
    source.b = tp.Variable(np.float32(2))
    prefix = tp.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    reader = tp.load_checkpoint(prefix)
    graph = pb.TrackableObjectGraph.FromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    model_node = graph.nodes[graph.nodes[0].children[0].node_id]
    assert [c.local_name for c in model_node.children] == ["a", "b"]
    model_node.children[1].local_name = "a"  # "a" twice, "b" never
    tensors = {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph.SerializeToString()
    hostile = os.path.join(tmp_path, "hostile")
    tp.save_tensors(hostile, tensors)
    model = tp.Module()
    model.a = tp.Variable(np.float32(0))
    model.b = tp.Variable(np.float32(0))
    status = tp.Checkpoint(model=model).read(hostile)
    _must_walk_and_fail(status, live_walks, "(root).model.b")


def test_a_list_changed_behind_its_wrapper_after_the_restore_still_raises(tmp_path, live_walks) -> None:
    prefix = tp.Checkpoint(model=_model(1.0)).write(str(tmp_path / "ckpt"))
    model = _model()
    status = tp.Checkpoint(model=model).read(prefix)
    list.append(model.vars, tp.Variable(np.float32(0)))  # not through the wrapper
    with pytest.raises(tp.errors.InvalidArgumentError, match="modified outside the wrapper"):
        status.assert_existing_objects_matched()


_names = names.filter(lambda n: n.isidentifier() and n != "root")


@pytest.mark.slow  # a differential test over random graphs (hypothesis): seconds
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    source=st.dictionaries(_names, graph_specs(3), max_size=3),
    keep=st.lists(st.booleans(), min_size=3, max_size=3),
    extra=st.dictionaries(_names, graph_specs(2), max_size=2),
)
def test_the_shortcut_never_passes_what_the_walk_would_fail(
    tmp_path_factory, source: dict, keep: list[bool], extra: dict
) -> None:
    # The live objects: some of the checkpoint's (alike, so that every value fits), and others.
    target = {name: spec for (name, spec), k in zip(source.items(), keep, strict=False) if k}
    target.update((name, spec) for name, spec in extra.items() if name not in source)
    directory = tmp_path_factory.mktemp("c")
    prefix = tp.Checkpoint(**{k: wrap(build_graph(v, [0], False)) for k, v in source.items()}).write(
        str(directory / "ckpt")
    )
    live = tp.Checkpoint(**{k: wrap(build_graph(v, [0], True)) for k, v in target.items()})
    status = live.read(prefix).expect_partial()
    coordinator = status._coordinator
    # The full check, as it runs without the shortcut.
    bound = coordinator.bound_ids()
    everything = status_module._live_by_id(status._root, status._attached, True)
    walk_passes = not any(status_module._holds_tensors(everything[key]) for key in everything.keys() - bound)
    shortcut = coordinator.coverage.binds_every_live_object(
        coordinator.bound, status._root, status._attached, coordinator.skip_slot_variables
    )
    assert not shortcut or walk_passes
    if target.keys() == source.keys():  # the same objects: the restore saw them all
        assert shortcut


def test_the_shortcut_records_why_it_declined(tmp_path, reuse, live_walks) -> None:
    prefix = _trained(1.0).write(str(tmp_path / "ckpt"))
    target = _trained()
    target.model.extra = tp.Variable(0.0)  # a live child the checkpoint has no node for
    status = target.read(prefix)
    coverage = status._coordinator.coverage
    assert not coverage.covered and "has children the checkpoint does not name" in (coverage.reason or "")
    with pytest.raises(AssertionError, match="unmatched objects"):
        status.assert_existing_objects_matched()
    assert live_walks == [1]
    assert any(m.startswith("walking the live objects to match them: ") for m in reuse.messages)
