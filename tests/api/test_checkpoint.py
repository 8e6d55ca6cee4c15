"""tp.Checkpoint: save/write/read/restore, deferred restore, slots, statuses and reports."""

from __future__ import annotations

import gc
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.helpers import build_graph, graph_specs, model, names, variables_of, wrap
from trackpoint._format._proto import trackable_object_graph_pb2 as pb


def test_save_numbers_prefixes_and_writes_only_the_latest_to_the_state_file(tmp_path) -> None:
    ckpt = tp.Checkpoint(model=model(1.0))
    assert ckpt.save(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt-1")
    assert ckpt.save(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt-2")
    assert ckpt.save_counter.numpy() == 2 and ckpt.save_counter.dtype == np.int64
    assert (tmp_path / "checkpoint").read_text() == (
        'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-2"\n'
    )
    assert tp.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")


def test_write_touches_neither_counter_nor_state_file(tmp_path) -> None:
    ckpt = tp.Checkpoint(model=model())
    assert ckpt.write(str(tmp_path / "w")) == str(tmp_path / "w")
    assert not (tmp_path / "checkpoint").exists()
    keys = [k for k, _ in tp.list_variables(str(tmp_path / "w"))]
    assert "save_counter/.ATTRIBUTES/VARIABLE_VALUE" not in keys


def test_restore_round_trip_from_prefix_and_directory(tmp_path) -> None:
    path = tp.Checkpoint(model=model(3.0)).save(str(tmp_path / "ckpt"))
    for source in (path, str(tmp_path)):
        m = model()
        ckpt = tp.Checkpoint(model=m)
        ckpt.restore(source).assert_consumed()
        assert m.dense.kernel.numpy().tolist() == [[3.0, 3.0], [3.0, 3.0]]
        assert m.layers[1]["bias"].numpy().tolist() == [3.0, 3.0, 3.0]
        assert ckpt.save_counter.numpy() == 1


def test_restore_of_a_write_checkpoint_leaves_save_counter_unmatched_like_tf(tmp_path) -> None:
    path = tp.Checkpoint(model=model(1.0)).write(str(tmp_path / "w"))
    with pytest.raises(AssertionError, match="save_counter"):
        tp.Checkpoint(model=model()).restore(path).assert_consumed()
    tp.Checkpoint(model=model()).read(path).assert_consumed()


def test_restore_on_create_for_attributes_list_elements_and_dict_entries(tmp_path) -> None:
    path = tp.Checkpoint(model=model(5.0)).save(str(tmp_path / "ckpt"))
    ckpt = tp.Checkpoint()
    status = ckpt.restore(path)
    report = status.report()
    assert report.pending["(root).model.dense.kernel"] is True
    m = tp.Module()
    ckpt.model = m
    m.dense = tp.Module()
    m.dense.kernel = tp.Variable(np.zeros((2, 2), np.float32))
    assert m.dense.kernel.numpy()[0, 0] == 5.0  # the moment it is tracked
    m.layers = []
    m.layers.append(tp.Variable(np.float32(0)))
    assert m.layers[0].numpy() == 5.0
    m.layers.append({})
    m.layers[1]["bias"] = tp.Variable(np.zeros(3))
    assert m.layers[1]["bias"].numpy().tolist() == [5.0, 5.0, 5.0]
    status.assert_consumed()
    assert status.report().complete


def test_latest_restore_wins(tmp_path) -> None:
    old = tp.Checkpoint(model=model(1.0)).write(str(tmp_path / "old"))
    new = tp.Checkpoint(model=model(2.0)).write(str(tmp_path / "new"))
    ckpt = tp.Checkpoint()
    ckpt.read(new).expect_partial()
    ckpt.read(old).expect_partial()  # later restore: its value wins for objects created afterwards
    ckpt.model = model()
    assert ckpt.model.dense.kernel.numpy()[0, 0] == 1.0


def test_created_variable_starts_with_pending_value(tmp_path) -> None:
    class Lazy(tp.Module):
        def build(self) -> tp.Variable:
            return self._add_variable("w", lambda v: tp.Variable(v, dtype=np.float32), np.zeros(2, np.float32))

    source = Lazy()
    source.build().assign([4.0, 5.0])
    path = tp.Checkpoint(lazy=source).write(str(tmp_path / "c"))
    target = Lazy()
    status = tp.Checkpoint(lazy=target).read(path)
    w = target.build()
    assert w.numpy().tolist() == [4.0, 5.0]
    status.assert_consumed()


def test_dtype_and_shape_mismatch_name_the_key_and_both_sides(tmp_path) -> None:
    path = tp.Checkpoint(v=tp.Variable([1.0, 2.0], name="v")).write(str(tmp_path / "c"))
    with pytest.raises(
        tp.errors.InvalidArgumentError, match=r"v/\.ATTRIBUTES/VARIABLE_VALUE.*float32\[3\].*float32\[2\]"
    ):
        tp.Checkpoint(v=tp.Variable([1.0, 2.0, 3.0], name="v")).read(path)
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"int32\[2\].*float32\[2\]"):
        tp.Checkpoint(v=tp.Variable([1, 2], name="v")).read(path)


def test_status_assertions(tmp_path) -> None:
    path = tp.Checkpoint(model=model(1.0)).write(str(tmp_path / "c"))
    partial = tp.Module()
    partial.dense = tp.Module()
    partial.dense.kernel = tp.Variable(np.zeros((2, 2), np.float32))
    status = tp.Checkpoint(model=partial).read(path)
    status.assert_existing_objects_matched().assert_nontrivial_match()
    with pytest.raises(AssertionError, match=r"Unresolved object in checkpoint \(root\)\.model\.layers"):
        status.assert_consumed()
    status.expect_partial()

    extra = model()
    extra.more = tp.Variable(1.0)
    status = tp.Checkpoint(model=extra).read(path)
    with pytest.raises(AssertionError, match=r"1 Python objects.*\(root\)\.model\.more"):
        status.assert_existing_objects_matched()
    assert status.report().missing_from_checkpoint == ("(root).model.more",)

    unrelated = tp.Module()
    unrelated.x = tp.Variable(1.0)
    with pytest.raises(AssertionError, match="Nothing except the root"):
        tp.Checkpoint(other=unrelated).read(path).expect_partial().assert_nontrivial_match()


def test_restore_none_gives_an_initialization_only_status() -> None:
    status = tp.Checkpoint(model=model()).restore(None)
    assert isinstance(status, tp.InitializationOnlyStatus)
    status.initialize_or_restore()
    with pytest.raises(AssertionError):
        status.assert_consumed()


def test_missing_checkpoint_and_plain_bundle(tmp_path) -> None:
    with pytest.raises(tp.errors.NotFoundError, match="holds no checkpoint.*numbers its prefixes"):
        tp.Checkpoint().restore(str(tmp_path / "ckpt"))
    tp.save_tensors(str(tmp_path / "plain"), {"x": np.zeros(1)})
    # A bundle without an object graph is a TF1 checkpoint: restored by name (tests/api/test_name_based.py).
    assert isinstance(tp.Checkpoint().restore(str(tmp_path / "plain")), tp.NameBasedSaverStatus)


def test_dropped_status_warns_once_unless_expect_partial(tmp_path) -> None:
    path = tp.Checkpoint(model=model(1.0), other=tp.Variable(1.0)).write(str(tmp_path / "c"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.Checkpoint(model=model()).read(path)
        gc.collect()
    messages = [str(w.message) for w in caught if "never restored" in str(w.message)]
    assert len(messages) == 1 and "(root).other" in messages[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.Checkpoint(model=model()).read(path).expect_partial()
        gc.collect()
    assert not [w for w in caught if "never restored" in str(w.message)]


def test_custom_tensor_names_use_tf_double_escape(tmp_path) -> None:
    class Custom(tp.Trackable):
        def __init__(self) -> None:
            self.values = {"a/b": np.float32(1.0), "c.d": np.int64(2)}

        def _serialize_to_tensors(self) -> dict:
            return dict(self.values)

        def _restore_from_tensors(self, restored_tensors: dict) -> None:
            self.values = dict(restored_tensors)

    path = tp.Checkpoint(c=Custom()).write(str(tmp_path / "c"))
    keys = {k for k, _ in tp.list_variables(path)}
    assert {"c/.ATTRIBUTES/a..Sb", "c/.ATTRIBUTES/c....d"} <= keys
    graph = pb.TrackableObjectGraph.FromString(tp.load_variable(path, "_CHECKPOINTABLE_OBJECT_GRAPH"))
    assert [a.name for a in graph.nodes[1].attributes] == ["a.Sb", "c..d"]
    fresh = Custom()
    fresh.values = {"a/b": 0, "c.d": 0}
    tp.Checkpoint(c=fresh).read(path).assert_consumed()
    assert fresh.values == {"a/b": np.float32(1.0), "c.d": np.int64(2)}


def test_root_checkpoint_attaches_dependencies_and_root_edge(tmp_path) -> None:
    root = tp.Module()
    root.a = tp.Variable(1.0)
    ckpt = tp.Checkpoint(root, extra=tp.Variable(2.0))
    path = ckpt.save(str(tmp_path / "ckpt"))
    graph = pb.TrackableObjectGraph.FromString(tp.load_variable(path, "_CHECKPOINTABLE_OBJECT_GRAPH"))
    assert [(c.local_name, c.node_id) for c in graph.nodes[0].children] == [
        ("a", 1),
        ("extra", 2),
        ("root", 0),
        ("save_counter", 3),
    ]
    fresh_root = tp.Module()
    fresh_root.a = tp.Variable(0.0)
    fresh = tp.Checkpoint(fresh_root, extra=tp.Variable(0.0))
    fresh.restore(path).assert_consumed()
    assert fresh.extra.numpy() == 2.0 and fresh.save_counter.numpy() == 1
    with pytest.raises(tp.errors.InvalidArgumentError, match="already exists"):
        tp.Checkpoint(root, a=tp.Variable(5.0))


@pytest.mark.parametrize("order", ["variables_first", "optimizer_first", "slots_created_later"])
def test_slot_restoration_in_either_order(tmp_path, order: str) -> None:
    w = tp.Variable([1.0, 2.0], name="w")
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.array([0.5, 0.25], np.float32), w)])
    path = tp.Checkpoint(w=w, opt=adam).write(str(tmp_path / "c"))
    expected_m = adam.get_slot(w, "m").numpy()

    ckpt = tp.Checkpoint()
    fresh_w = tp.Variable([0.0, 0.0], name="w")
    fresh_opt = tp.optimizers.Adam(0.1)
    if order == "variables_first":
        ckpt.w = fresh_w
        status = ckpt.read(path)
        ckpt.opt = fresh_opt
    elif order == "optimizer_first":
        ckpt.opt = fresh_opt
        status = ckpt.read(path)
        ckpt.w = fresh_w
    else:
        ckpt.w, ckpt.opt = fresh_w, fresh_opt
        status = ckpt.read(path)
    assert fresh_opt.get_slot(fresh_w, "m").numpy().tolist() == expected_m.tolist()
    fresh_opt.apply_gradients([(np.zeros(2, np.float32), fresh_w)])  # creates beta powers from the checkpoint
    # restored as 0.9**2, then one more step
    assert fresh_opt._lookup_dependency("beta1_power").numpy() == np.float32(0.9) * np.float32(0.9) * np.float32(0.9)
    status.assert_consumed()


def test_add_slot_after_restore_starts_with_checkpoint_value(tmp_path) -> None:
    w = tp.Variable([1.0], name="w")
    opt = tp.optimizers.SGD(0.1, momentum=0.5)
    opt.add_slot(w, "custom", np.array([7.0], np.float32))
    path = tp.Checkpoint(w=w, opt=opt).write(str(tmp_path / "c"))
    fresh_w, fresh_opt = tp.Variable([0.0], name="w"), tp.optimizers.SGD(0.1, momentum=0.5)
    status = tp.Checkpoint(w=fresh_w, opt=fresh_opt).read(path)
    assert fresh_opt.add_slot(fresh_w, "custom").numpy().tolist() == [7.0]
    status.assert_consumed()


def test_skip_nothing_report_lists_unused_attributes(tmp_path) -> None:
    class Two(tp.Trackable):
        def _serialize_to_tensors(self) -> dict:
            return {"a": np.int32(1), "b": np.int32(2)}

    class One(tp.Trackable):
        def _serialize_to_tensors(self) -> dict:
            return {"a": np.int32(0)}

        def _restore_from_tensors(self, restored_tensors: dict) -> None:
            self.got = restored_tensors

    path = tp.Checkpoint(x=Two()).write(str(tmp_path / "c"))
    one = One()
    status = tp.Checkpoint(x=one).read(path)
    assert one.got == {"a": 1}
    assert status.report().unused_attributes == {"(root).x": ("b",)}
    with pytest.raises(AssertionError, match="Unused attributes"):
        status.assert_consumed()


# -- random graphs -------------------------------------------------------------------------


@pytest.mark.slow  # random object graphs (hypothesis): seconds
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(names.filter(lambda n: n.isidentifier() and n != "root"), graph_specs(3), min_size=1, max_size=4)
)
def test_random_graphs_restore_into_fresh_copies(tmp_path_factory, spec: dict) -> None:
    directory = tmp_path_factory.mktemp("g")
    source = tp.Checkpoint(**{name: wrap(build_graph(child, [0], False)) for name, child in spec.items()})
    path = source.save(os.path.join(directory, "ckpt"))
    raw = tp.load_variable(path, "_CHECKPOINTABLE_OBJECT_GRAPH")
    assert pb.TrackableObjectGraph.FromString(raw).SerializeToString() == raw  # our encoder is protobuf's
    target_objects = {name: wrap(build_graph(child, [0], True)) for name, child in spec.items()}
    target = tp.Checkpoint(**target_objects)
    target.restore(path).assert_consumed()
    for (_, a), (_, b) in zip(variables_of(source), variables_of(target), strict=False):
        assert a.numpy().tolist() == b.numpy().tolist()
