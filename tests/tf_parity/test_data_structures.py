"""Port of TensorFlow's ``tensorflow/python/trackable/data_structures_test.py`` to trackpoint.

TF's ``data_structures.ListWrapper`` / ``_DictWrapper`` / ``_TupleWrapper`` are
``trackpoint._tracking.data_structures.ListWrapper`` / ``DictWrapper`` / ``TupleWrapper``;
``autotrackable.AutoTrackable`` and ``module.Module`` are ``tp.AutoTrackable`` and ``tp.Module``;
``variables.Variable`` and ``ResourceVariable`` are ``tp.Variable``; ``util.list_objects`` is
the breadth-first walk over ``_trackable_children()`` in :func:`_list_objects`. TF's
``_maybe_initialize_trackable()`` (lazy set-up, nothing to port) is dropped from the
"unable to save" checks. Source: the ``tensorflow/tensorflow`` copy of the file (70 test methods).

Ported partially (the dropped assertions need TF-only machinery; each is marked in place):
    ListWrapperTest.testListWrapperBasic: without the ``TensorShape + ListWrapper`` assertion and
        the ``data_structures.List`` one.
    MappingTests.testHashing: the ``_DictWrapper`` half only (the first half hashes ``data_structures.Mapping``).
    MappingTests.testJSONSerialization, ListTests.testJSONSerialization, TupleTests.testJSONSerialization:
        plain ``json.dumps`` (trackpoint has no ``serialization.get_json_type`` hook).
    TupleTests.testUnnamedSubclassing: without the final ``nest.assert_same_structure``.

Left out:
    ListTests.testNotTrackable: tests ``data_structures.List``, TF's non-list container; trackpoint has none.
    ListTests.testCallNotImplemented: ``data_structures.List``.
    ListTests.testNoPop: ``data_structures.List``.
    ListTests.testNesting: graph mode and ``data_structures.List`` layer collection.
    ListTests.testNonLayerVariables: Keras layer properties (``layers``, ``trainable_weights``) of ``List``.
    ListTests.testCopy: ``data_structures.List.copy``.
    ListTests.testSlicing: ``data_structures.List`` slicing.
    ListTests.testHash: ``data_structures.List`` is hashable (ListWrapper is not).
    ListTests.testIMul_zero: ``data_structures.List`` append-only error.
    ListTests.testIMul: ``data_structures.List``.
    ListTests.testMul: ``data_structures.List``.
    ListTests.testRMul: ``data_structures.List``.
    ListWrapperTest.testSameStructure: ``tf.nest`` structure utilities.
    ListWrapperTest.testFunctionCaching: ``tf.function`` tracing.
    MappingTests.testNoOverwrite: ``data_structures.Mapping``, TF's non-dict container.
    MappingTests.testNonStringKeys: ``data_structures.Mapping``.
    MappingTests.testSameStructure: ``tf.nest`` structure utilities.
    MappingTests.testFunctionCaching: ``tf.function`` tracing.
    TupleTests.testNonLayerVariables: Keras layer properties (``layers``, ``trainable_weights``).
    TupleTests.testSameStructure: ``tf.nest`` structure utilities.
    TupleTests.testFlatten: ``tf.nest`` flatten / pack_sequence_as.
    TupleTests.testFunctionCaching: ``tf.function`` tracing.
    TupleTests.testPythonMapImpl: ``tf.nest`` map_structure_up_to.
    TupleTests.testDatasetMap: ``tf.data``.
    TupleTests.testDatasetMapNamed: ``tf.data``.

Test names carry TF's class where TF reuses a method name in several classes
(``MappingTests.testPickle`` -> ``test_mapping_pickle``).
"""

from __future__ import annotations

import collections
import copy
import json
import pickle
from collections import deque

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._tracking.data_structures import DictWrapper, ListWrapper, TupleWrapper


def _list_objects(root: tp.Trackable) -> list[tp.Trackable]:
    """Every object reachable from ``root``, breadth first (TF's ``util.list_objects``)."""
    objects = [root]
    seen = {id(root)}
    queue = deque([root])
    while queue:
        for child in queue.popleft()._trackable_children().values():
            if id(child) not in seen:
                seen.add(id(child))
                objects.append(child)
                queue.append(child)
    return objects


def _assert_unable_to_save(wrapper: tp.Trackable, msg: str) -> None:
    """TF's ``ListWrapperTest.assertUnableToSave``."""
    with pytest.raises(ValueError, match=msg):
        wrapper._trackable_children()


# -- ListTests ----------------------------------------------------------------------------


def test_list_json_serialization() -> None:
    """Ports ListTests.testJSONSerialization."""
    obj = tp.AutoTrackable()
    obj.l = [1]
    assert json.dumps(obj.l) == "[1]"  # what TF 2.21 gives with serialization.get_json_type


# -- ListWrapperTest ----------------------------------------------------------------------

_IGNORED = ("__new__", "__init__", "__subclasshook__", "__getattribute__")


def test_overrides_all_list_methods() -> None:
    """Ports ListWrapperTest.test_overrides_all_list_methods."""
    not_overridden = []
    for name in dir(list):
        if name in _IGNORED:
            continue
        list_method = getattr(list, name)
        if not callable(list_method):
            continue
        object_method = getattr(object, name, None)
        if object_method is not None and object_method == list_method:
            continue  # not overridden from object
        if list_method == getattr(ListWrapper, name):
            not_overridden.append(name)
    assert not not_overridden, f"ListWrapper does not override {not_overridden}"


def test_list_wrapper_pickle() -> None:
    """Ports ListWrapperTest.testPickle."""
    original = ListWrapper([1, 2])
    serialized = pickle.dumps(original)
    del original
    deserialized = pickle.loads(serialized)
    assert [1, 2] == deserialized


def test_mutate_without_trackable_components() -> None:
    """Ports ListWrapperTest.testMutateWithoutTrackableComponents."""
    m = tp.Module()
    m.l = [1, 2]
    m.l.insert(0, 0)
    assert m.l == [0, 1, 2]
    assert m.l._trackable_children() == {}


def test_list_wrapper_basic() -> None:
    """Ports ListWrapperTest.testListWrapperBasic."""
    # ListWrapper, unlike List, compares like the built-in list type (since it is used to
    # automatically replace lists).
    a = tp.AutoTrackable()
    b = tp.AutoTrackable()
    assert [a, a] == [a, a]
    assert ListWrapper([a, a]) == ListWrapper([a, a])
    assert [a, a] == ListWrapper([a, a])
    assert ListWrapper([a, a]) == [a, a]
    assert [a, a] != [b, a]
    assert ListWrapper([a, a]) != ListWrapper([b, a])
    assert [a, a] != ListWrapper([b, a])
    assert [a] < [a, b]
    assert ListWrapper([a]) < ListWrapper([a, b])
    assert [a] <= [a, b]
    assert ListWrapper([a]) <= ListWrapper([a, b])
    assert [a, b] > [a]
    assert ListWrapper([a, b]) > ListWrapper([a])
    assert [a, b] >= [a]
    assert ListWrapper([a, b]) >= ListWrapper([a])
    assert [a] == ListWrapper([a])
    # TF: assertEqual([a], list(data_structures.List([a]))) -- no List in trackpoint.
    assert [a, a] == ListWrapper([a]) + [a]
    assert [a, a] == [a] + ListWrapper([a])
    assert isinstance(ListWrapper([a]), list)
    # TF: ListWrapper([None]) + TensorShape([2]) -- no TensorShape in trackpoint.


def test_accepts_non_trackable_content() -> None:
    """Ports ListWrapperTest.testAcceptsNonTrackableContent."""
    l = ListWrapper([1, 2, 3])
    assert l == [1, 2, 3]


def test_wrapper_changes_list() -> None:
    """Ports ListWrapperTest.testWrapperChangesList."""
    l = []
    l_wrapper = ListWrapper(l)
    l_wrapper.append(1)
    assert [1] == l


def test_list_changes_wrapper() -> None:
    """Ports ListWrapperTest.testListChangesWrapper."""
    l = []
    l_wrapper = ListWrapper(l)
    l.append(1)
    assert [1] == l_wrapper


def test_not_hashable() -> None:
    """Ports ListWrapperTest.testNotHashable."""
    with pytest.raises(TypeError):
        hash(ListWrapper())


def test_del_item() -> None:
    """Ports ListWrapperTest.testDelItem."""
    l = ListWrapper([1, 2, 3, [4]])
    del l[0]
    assert l == [2, 3, [4]]
    _assert_unable_to_save(l, "Unable to save .*__delitem__")


def test_del_slice() -> None:
    """Ports ListWrapperTest.testDelSlice."""
    l = ListWrapper([1, 2, 3, [4]])
    del l[2:3]
    assert l == [1, 2, [4]]
    _assert_unable_to_save(l, "Unable to save .*__delslice__")


def test_set_slice_can_save_for_non_trackable_items() -> None:
    """Ports ListWrapperTest.testSetSlice_canSaveForNonTrackableItems."""
    l = ListWrapper([1, 2, 3, 4])
    l[:] = 2, 8, 9, 0
    assert l == [2, 8, 9, 0]
    assert len(l._trackable_children()) == 0


def test_set_slice_cannot_save_if_trackable_modified() -> None:
    """Ports ListWrapperTest.testSetSlice_cannotSaveIfTrackableModified."""
    v1 = tp.Variable(1.0)
    v2 = tp.Variable(1.0)
    l = ListWrapper([1, 2, v1, v2])
    l[:] = 2, 8, 9, v2
    assert l == [2, 8, 9, v2]
    _assert_unable_to_save(l, "Unable to save .*__setslice__")


def test_set_slice_truncate() -> None:
    """Ports ListWrapperTest.testSetSlice_truncate."""
    l = ListWrapper([1, 2, 3, 4])
    l[:] = []
    assert l == []


def test_set_slice_extend() -> None:
    """Ports ListWrapperTest.testSetSlice_extend."""
    l = ListWrapper([1, 2, 3, 4])
    l[2:] = 1, 2, 3, 4
    assert l == [1, 2, 1, 2, 3, 4]


def test_imul_negative() -> None:
    """Ports ListWrapperTest.testIMulNegative."""
    l = ListWrapper([1, 2, 3, [4]])
    l *= -1
    assert l == [1, 2, 3, [4]] * -1
    _assert_unable_to_save(l, "Unable to save")


def test_imul_positive(tmp_path) -> None:
    """Ports ListWrapperTest.testIMulPositive."""
    v = tp.Variable(1.0)
    l = ListWrapper([1, 2, 3, 4, v])
    assert {"4": v} == l._trackable_children()
    root = tp.Checkpoint(l=l)
    path = root.save(str(tmp_path / "ckpt"))
    v.assign(5.0)
    l *= 2
    assert l == [1, 2, 3, 4, v, 1, 2, 3, 4, v]
    assert {"4": v, "9": v} == l._trackable_children()
    root.restore(path)
    np.testing.assert_allclose(1.0, v.numpy())


def test_sort() -> None:
    """Ports ListWrapperTest.testSort."""
    l = ListWrapper([[1], [2], [3], [4]])
    l.sort()
    assert l == [[1], [2], [3], [4]]
    # Regardless of being a no-op for the input list, we still refuse to save: otherwise
    # sort on a ListWrapper would sometimes be trackable and sometimes not.
    _assert_unable_to_save(l, "Unable to save .*sort")


# -- MappingTests -------------------------------------------------------------------------


def test_mapping_json_serialization() -> None:
    """Ports MappingTests.testJSONSerialization."""
    obj = tp.AutoTrackable()
    obj.d = {"a": 2}
    assert json.dumps(obj.d) == '{"a": 2}'  # what TF 2.21 gives with serialization.get_json_type


def test_hashing() -> None:
    """Ports MappingTests.testHashing (its dict-wrapper half; the first half hashes data_structures.Mapping)."""
    # In contrast to Mapping, dict wrappers are not hashable.
    a = tp.AutoTrackable()
    a.d = {}
    assert {} == a.d
    assert not ({} != a.d)  # noqa: SIM202  (TF tests __ne__ on purpose)
    assert {1: 2} != a.d
    with pytest.raises(TypeError, match="unhashable"):
        _ = {a.d}


def test_list_shallow_copy() -> None:
    """Ports MappingTests.testListShallowCopy."""
    root = tp.AutoTrackable()
    orig_list = [[1.0]]
    root.a = orig_list
    copied = copy.copy(root.a)
    assert [[1.0]] == copied
    assert root.a is not copied
    assert root.a[0] is copied[0]

    # Dirtiness should be inherited.
    _list_objects(root.a)
    orig_list.append(1.0)
    with pytest.raises(ValueError):
        _list_objects(root.a)
    with pytest.raises(ValueError):
        _list_objects(copy.copy(root.a))


def test_list_deep_copy() -> None:
    """Ports MappingTests.testListDeepCopy."""
    root = tp.AutoTrackable()
    orig_list = [[1.0]]
    root.a = orig_list
    copied = copy.deepcopy(root.a)
    assert [[1.0]] == copied
    assert root.a is not copied
    assert root.a[0] is not copied[0]

    # Dirtiness should be inherited.
    _list_objects(root.a)
    orig_list.append(1.0)
    with pytest.raises(ValueError):
        _list_objects(root.a)
    with pytest.raises(ValueError):
        _list_objects(copy.deepcopy(root.a))


def test_dict_shallow_copy() -> None:
    """Ports MappingTests.testDictShallowCopy."""
    root = tp.AutoTrackable()
    orig_dict = {"a": [1.0]}
    root.a = orig_dict
    copied = copy.copy(root.a)
    assert [1.0] == copied["a"]
    assert root.a is not copied
    assert root.a["a"] is copied["a"]

    copied = root.a.copy()
    assert [1.0] == copied["a"]
    assert root.a is not copied
    assert root.a["a"] is copied["a"]

    # Dirtiness should be inherited.
    _list_objects(root.a)
    orig_dict["b"] = []
    with pytest.raises(ValueError):
        _list_objects(root.a)
    with pytest.raises(ValueError):
        _list_objects(copy.copy(root.a))


def test_dict_deep_copy() -> None:
    """Ports MappingTests.testDictDeepCopy."""
    root = tp.AutoTrackable()
    orig_dict = {"a": [1.0]}
    root.a = orig_dict
    copied = copy.deepcopy(root.a)
    assert [1.0] == copied["a"]
    assert root.a is not copied
    assert root.a["a"] is not copied["a"]

    # Dirtiness should be inherited.
    _list_objects(root.a)
    orig_dict["b"] = []
    with pytest.raises(ValueError):
        _list_objects(root.a)
    with pytest.raises(ValueError):
        _list_objects(copy.deepcopy(root.a))


def test_shallow_copy_trackable() -> None:
    """Ports MappingTests.testShallowCopyTrackable."""
    original = tp.AutoTrackable()
    original_sub = tp.AutoTrackable()
    original.a = [[1.0]]
    original.b = {"a": original_sub}
    shallow_copied = copy.copy(original)
    assert original_sub is shallow_copied.b["a"]
    assert original is not shallow_copied
    assert [[1.0]] == shallow_copied.a
    shallow_deps = _list_objects(shallow_copied)
    assert shallow_copied.a in shallow_deps
    assert shallow_copied.b in shallow_deps
    assert shallow_copied.b["a"] in shallow_deps


def test_deep_copy_trackable() -> None:
    """Ports MappingTests.testDeepCopyTrackable."""
    original = tp.AutoTrackable()
    original_sub = tp.AutoTrackable()
    original.a = [[1.0]]
    original.b = {"a": original_sub}
    assert isinstance(original.b, dict)
    deep_copied = copy.deepcopy(original)
    assert isinstance(deep_copied.b, dict)
    assert original is not deep_copied
    assert original_sub is not deep_copied.b["a"]
    assert [[1.0]] == deep_copied.a
    assert isinstance(deep_copied.b["a"], tp.AutoTrackable)
    deps = _list_objects(deep_copied)
    assert deep_copied.a in deps
    assert deep_copied.b in deps
    assert deep_copied.b["a"] in deps
    assert original_sub not in deps


def test_constructable_from_sequence() -> None:
    """Ports MappingTests.testConstructableFromSequence."""
    result = DictWrapper([(1, 2), (3, 4)])
    assert isinstance(result, dict)
    assert {1: 2, 3: 4} == result


def test_mapping_pickle() -> None:
    """Ports MappingTests.testPickle."""
    original = DictWrapper({"a": 1, "b": 2})
    serialized = pickle.dumps(original)
    del original
    deserialized = pickle.loads(serialized)
    assert {"a": 1, "b": 2} == deserialized


def test_list_add_order() -> None:
    """Ports MappingTests.testListAddOrder."""
    assert [1.0, 2.0] == ListWrapper([1.0]) + ListWrapper([2.0])
    assert [1.0, 2.0] == ListWrapper([1.0]) + [2.0]
    assert [1.0, 2.0] == [1.0] + ListWrapper([2.0])


# -- TupleTests ---------------------------------------------------------------------------


def test_tuple_json_serialization() -> None:
    """Ports TupleTests.testJSONSerialization."""
    obj = tp.AutoTrackable()
    obj.l = (1,)
    assert json.dumps(obj.l) == "[1]"  # what TF 2.21 gives with serialization.get_json_type


def test_tuple_copy() -> None:
    """Ports TupleTests.testCopy."""
    v1 = tp.Variable(1.0)
    v2 = tp.Variable(1.0)
    l1 = TupleWrapper((v1, v2))
    l2 = copy.copy(l1)
    assert l1 == (v1, v2)
    assert l2 == (v1, v2)
    assert l1[0] is l2[0]
    l2_deep = copy.deepcopy(l1)
    assert l1[0] is not l2_deep[0]
    with pytest.raises(AttributeError):
        l2.append(v1)


def test_tuple_slicing() -> None:
    """Ports TupleTests.testSlicing."""
    v1 = tp.Variable(1.0)
    v2 = tp.Variable(1.0)
    v3 = tp.Variable(1.0)
    v4 = tp.Variable(1.0)
    l = TupleWrapper((v1, v2, v3, v4))
    assert l[1:] == (v2, v3, v4)
    assert l[1:-1] == (v2, v3)
    assert l[:-1] == (v1, v2, v3)


def test_tuple_hash() -> None:
    """Ports TupleTests.testHash."""
    has_sequences = {TupleWrapper(), TupleWrapper()}
    assert len(has_sequences) == 1
    assert TupleWrapper() in has_sequences


def test_tuple_imul_zero() -> None:
    """Ports TupleTests.testIMul_zero."""
    l = TupleWrapper((1,))
    l *= 0
    assert () == l


def test_tuple_imul() -> None:
    """Ports TupleTests.testIMul."""
    # Tuple behavior differs from list behavior: lists are mutated by imul/iadd, tuples
    # assign a new object to the left hand side of the expression.
    v = tp.Variable(1.0)
    l = TupleWrapper((v,))
    original = l
    l *= 2
    assert l == (v,) * 2
    assert original != (v,) * 2


def test_tuple_iadd() -> None:
    """Ports TupleTests.testIAdd."""
    v = tp.Variable(1.0)
    l = TupleWrapper((v,))
    original = l
    l += (1,)
    assert l == (v, 1)
    assert original != (v, 1)
    assert original == (v,)


def test_tuple_mul() -> None:
    """Ports TupleTests.testMul."""
    v = tp.Variable(1.0)
    l = TupleWrapper((v, v, v))
    assert l * 2 == (v, v, v) * 2


def test_tuple_rmul() -> None:
    """Ports TupleTests.testRMul."""
    v = tp.Variable(1.0)
    l = TupleWrapper((v, v, v))
    assert 2 * l == (v, v, v) * 2


def test_tuple_pickle() -> None:
    """Ports TupleTests.testPickle."""
    original = TupleWrapper((1, 2))
    serialized = pickle.dumps(original)
    del original
    deserialized = pickle.loads(serialized)
    assert (1, 2) == deserialized


def test_named_tuple() -> None:
    """Ports TupleTests.testNamedTuple."""
    named = collections.namedtuple("Named", ("x", "y"))
    v = tp.Variable(2)
    nt = named(x=v, y=2)
    m = tp.Module()
    m.nt = nt
    assert v is m.nt.x
    assert v is m.nt[0]
    assert v is m._trackable_children()["nt"]._trackable_children()["x"]
    assert 2 == m.nt.y


def test_named_tuple_conflicting_attributes() -> None:
    """Ports TupleTests.testNamedTupleConflictingAttributes."""
    named = collections.namedtuple("Named", ("x", "weights"))
    v = tp.Variable(2)
    nt = named(x=v, weights=3)
    m = tp.Module()
    m.nt = nt
    assert 3 == m.nt.weights


def test_named_subclassing() -> None:
    """Ports TupleTests.testNamedSubclassing."""
    named = collections.namedtuple("Named", ("x", "y"))
    v = tp.Variable(2)

    class NamedSubclass(named):
        def __new__(cls, x, y):
            del y  # unused
            return super().__new__(cls, x, 3)

        @property
        def summed(self):
            return self.x.numpy() + self.y  # TF adds the tensor; tp.Variable has no operators

    nt = NamedSubclass(x=v, y=2)
    m = tp.Module()
    m.nt = nt
    assert 3 == m.nt.y
    assert v is m.nt.x
    assert v in m._trackable_children()["nt"]._trackable_children().values()
    assert "x" in m.nt._trackable_children()
    assert "0" in m.nt._trackable_children()
    assert 5 == m.nt.summed


def test_unnamed_subclassing() -> None:
    """Ports TupleTests.testUnnamedSubclassing (without its tf.nest assertion)."""
    v = tp.Variable(2)

    class UnnamedSubclass(tuple):
        @property
        def summed(self):
            return self[0].numpy() + self[1]  # TF adds the tensor; tp.Variable has no operators

    unt = UnnamedSubclass([v, 2])
    m = tp.Module()
    m.unt = unt
    assert "0" in m.unt._trackable_children()
    assert len(m.unt._trackable_children()) == 1
    assert 4 == m.unt.summed


def test_namedtuple_subclass_with_custom_new(tmp_path) -> None:
    """Ports TupleTests.testNamedtupleSubclassWithCustomNew."""

    class SubclassWithDifferentArgs(collections.namedtuple("A", ["x"])):
        def __new__(cls):
            return super().__new__(cls, [])

    nt = SubclassWithDifferentArgs()
    m = tp.Module()
    m.nt = nt
    m.nt.x.append(tp.Variable(1.0))
    ckpt = tp.Checkpoint(m=m)
    # TF 2.21: "Unable to save because the namedtuple ... is not constructable from its _fields".
    with pytest.raises(ValueError):
        ckpt.save(str(tmp_path / "ckpt"))


def test_loop_assigned_module() -> None:
    """Ports TupleTests.testLoopAssignedModule."""
    m = tp.Module()
    m.s = (m,)
    assert len(m._trackable_children()) == 1
    assert "s" in m._trackable_children()
    assert m.s is m._trackable_children()["s"]
    assert () == m.trainable_variables
