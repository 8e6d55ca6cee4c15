"""Live object model: attribute tracking, containers, variables, python state."""

from __future__ import annotations

import collections

import ml_dtypes
import numpy as np
import pytest

import trackpoint as tp


def _children(obj: tp.Trackable) -> list[str]:
    return list(obj._trackable_children())


def test_attributes_tracked_in_assignment_order_and_reassignment_keeps_position() -> None:
    m = tp.Module()
    m.b = tp.Variable(1.0)
    m.a = tp.Variable(2.0)
    m.c = tp.Module()
    replacement = tp.Variable(3.0)
    m.b = replacement
    assert _children(m) == ["b", "a", "c"]
    assert m._lookup_dependency("b") is replacement
    m.a = 5  # a plain value stops tracking
    del m.c
    assert _children(m) == ["b"]


def test_no_dependency_is_stored_untracked() -> None:
    m = tp.Module()
    m.hidden = tp.NoDependency(tp.Variable(1.0))
    assert isinstance(m.hidden, tp.Variable) and _children(m) == []


def test_containers_become_nodes_named_like_tf() -> None:
    pair = collections.namedtuple("Pair", ["x", "y"])
    m = tp.Module()
    m.lst = [tp.Variable(1.0), 5, [tp.Variable(2.0)]]
    m.dct = {"b": tp.Variable(1), "a": tp.Variable(2), "n": 3}
    m.tup = pair(tp.Variable(1.0), tp.Variable(2.0))
    m.empty = []
    m.plain = (1, 2)
    assert _children(m) == ["lst", "dct", "tup", "empty"]
    assert _children(m.lst) == ["0", "2"] and _children(m.lst[2]) == ["0"]
    assert _children(m.dct) == ["b", "a"]
    assert _children(m.tup) == ["x", "y", "0", "1"]
    assert m.tup.x is m.tup[0] and m.tup == m.tup.unwrap() and m.plain == (1, 2)
    assert m.lst == m.lst  # still behaves as a list
    m.lst.append(tp.Variable(3.0))
    assert _children(m.lst) == ["0", "2", "3"]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda lst: lst.__setitem__(0, tp.Variable(9.0)),
        lambda lst: lst.__delitem__(0),
        lambda lst: lst.insert(0, tp.Variable(1.0)),
        lambda lst: lst.sort(key=id),
        lambda lst: lst.pop(),
        lambda lst: lst.reverse(),
    ],
)
def test_non_append_mutation_makes_save_fail(mutate, tmp_path) -> None:
    m = tp.Module()
    m.lst = [tp.Variable(1.0), tp.Variable(2.0)]
    mutate(m.lst)
    with pytest.raises(ValueError, match="append-only"):
        tp.Checkpoint(m=m).write(str(tmp_path / "c"))


def test_non_append_mutation_after_a_restore_makes_its_status_check_fail(tmp_path) -> None:
    """As in TF, checking which live objects a restore matched walks the lists, which refuse to be walked."""
    m = tp.Module()
    m.lst = [tp.Variable(1.0), tp.Variable(2.0)]
    path = tp.Checkpoint(m=m).write(str(tmp_path / "c"))
    status = tp.Checkpoint(m=m).read(path)
    status.assert_consumed()
    m.lst.reverse()  # every element still bound: only walking the list can fail
    with pytest.raises(ValueError, match="append-only"):
        status.assert_existing_objects_matched()


def test_non_string_dict_key_makes_save_fail(tmp_path) -> None:
    m = tp.Module()
    m.dct = {1: tp.Variable(1.0)}
    with pytest.raises(ValueError, match="non-string key"):
        tp.Checkpoint(m=m).write(str(tmp_path / "c"))


def test_module_variables_and_names() -> None:
    class MyDense(tp.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tp.Variable(1.0, name="w")
            self.inner = tp.Module(name="inner")
            self.inner.frozen = tp.Variable(2.0, name="frozen", trainable=False)

    d = MyDense()
    assert d.name == "my_dense"
    assert [v.name for v in d.variables] == ["frozen", "w"]
    assert [v.name for v in d.trainable_variables] == ["w"]
    assert [s.name for s in d.submodules] == ["inner"]
    with pytest.raises(ValueError):
        tp.Module(name="not valid")


@pytest.mark.parametrize(
    "value, dtype",
    [
        (1.0, np.float32),
        (1, np.int32),
        (2**40, np.int64),
        (True, np.bool_),
        ("s", object),
        (b"s", object),
        ([1, 2.5], np.float32),
        ([[1, 2]], np.int32),
        (np.float64(1), np.float64),
        (np.arange(3, dtype=np.uint8), np.uint8),
        (np.zeros(2, ml_dtypes.bfloat16), ml_dtypes.bfloat16),
        (1 + 2j, np.complex128),
    ],
)
def test_variable_dtype_inference(value, dtype) -> None:
    assert tp.Variable(value).dtype == np.dtype(dtype)


def test_variable_assign_checks_shape_and_dtype() -> None:
    v = tp.Variable([1.0, 2.0], name="w")
    with pytest.raises(tp.errors.InvalidArgumentError, match="'w' of shape"):
        v.assign([1.0])
    with pytest.raises(tp.errors.InvalidArgumentError, match="float64 value to variable 'w'"):
        v.assign(np.zeros(2))
    with pytest.raises(tp.errors.InvalidArgumentError, match="float values"):
        tp.Variable([1, 2], name="i").assign([1.5, 2.0])
    assert v.assign([3, 4]).numpy().tolist() == [3.0, 4.0]
    assert v.assign_sub([1.0, 1.0]).numpy().tolist() == [2.0, 3.0]
    assert tp.Variable(b"a").assign("b").numpy() == b"b"


def test_variable_values_are_copy_on_write() -> None:
    v = tp.Variable(np.arange(4, dtype=np.float32))
    snapshot = v.read_value()
    v.assign_add(np.ones(4, np.float32))
    assert snapshot.tolist() == [0, 1, 2, 3]  # a save holding the old array sees the old state
    assert not v.numpy().flags.writeable
    with pytest.raises(ValueError):
        v.numpy()[0] = 5
    source = np.zeros(2)
    w = tp.Variable(source)
    source[0] = 1  # the caller's array is copied at construction
    assert w.numpy()[0] == 0


def test_python_state_round_trip(tmp_path) -> None:
    class Counter(tp.PythonState):
        def __init__(self) -> None:
            self.n = 0

        def serialize(self) -> str:
            return str(self.n)

        def deserialize(self, string_value: bytes) -> None:
            self.n = int(string_value)

    c = Counter()
    c.n = 42
    path = tp.Checkpoint(c=c, v=tp.Variable(1.0)).write(str(tmp_path / "c"))
    keys = [k for k, _ in tp.list_variables(path)]
    assert "c/.ATTRIBUTES/py_state" in keys
    fresh = Counter()
    tp.Checkpoint(c=fresh, v=tp.Variable(0.0)).read(path).assert_consumed()
    assert fresh.n == 42
