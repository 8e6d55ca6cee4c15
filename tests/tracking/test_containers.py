"""List and dict wrappers are views of the user's own list and dict; tuple wrappers behave as their tuple."""

from __future__ import annotations

import collections
import copy
import json

import numpy as np
import pytest
from typing_extensions import Self

import trackpoint as tp


def _children(obj: tp.Trackable) -> list[str]:
    return list(obj._trackable_children())


def _write(root: tp.Trackable, path: str) -> list[str]:
    written = tp.Checkpoint(root=root).write(path)
    return sorted(k for k, _ in tp.list_variables(written) if not k.startswith("_CHECKPOINTABLE"))


def test_a_change_through_either_name_is_one_change() -> None:
    vs: list = [1]
    d: dict = {"a": 1}
    m = tp.Module()
    m.vs, m.d = vs, d
    v, w = tp.Variable(1.0), tp.Variable(2.0)
    m.vs.append(v)
    m.d["w"] = w
    assert vs == [1, v] and vs[1] is v and d == {"a": 1, "w": w}
    vs.append(3)
    d["b"] = 2
    assert m.vs == [1, v, 3] and len(m.vs) == 3 and list(m.vs) == [1, v, 3] and 3 in m.vs
    assert dict(m.d) == {"a": 1, "w": w, "b": 2} and m.d["b"] == 2 and sorted(m.d) == ["a", "b", "w"]


def test_nested_containers_are_wrapped_inside_the_users_list() -> None:
    inner: list = []
    outer = [inner, {"k": []}]
    m = tp.Module()
    m.outer = outer
    assert isinstance(outer[0], tp.Trackable) and outer[0] == inner and outer[0] is not inner
    outer[0].append(tp.Variable(1.0))  # through the inner wrapper, now held by the user's list
    assert _children(m.outer[0]) == ["0"]


def test_an_outside_edit_fails_a_save_that_would_replay_the_previous_layout(tmp_path) -> None:
    """The second save would reuse the first one's plan; the wrapper's own check stops it."""
    vs = [tp.Variable(1.0)]
    d = {"a": tp.Variable(2.0)}
    m = tp.Module()
    m.vs, m.d = vs, d
    ckpt = tp.Checkpoint(root=m)
    ckpt.write(str(tmp_path / "first"))
    ckpt.write(str(tmp_path / "second"))  # a replay: nothing changed
    vs.append(tp.Variable(3.0))
    with pytest.raises(ValueError, match="modified outside the wrapper"):
        ckpt.write(str(tmp_path / "third"))

    m2 = tp.Module()
    m2.d = d
    ckpt2 = tp.Checkpoint(root=m2)
    ckpt2.write(str(tmp_path / "d1"))
    d["a"] = tp.Variable(4.0)  # a replaced value, same length
    with pytest.raises(tp.errors.InvalidArgumentError, match="The wrapped dictionary was modified outside"):
        ckpt2.write(str(tmp_path / "d2"))


def test_outside_edits_of_plain_values_also_fail_the_save(tmp_path) -> None:
    m = tp.Module()
    cfg: dict = {"lr": 0.1}
    sizes = [1, 2]
    m.cfg, m.sizes, m.w = cfg, sizes, tp.Variable(1.0)
    cfg["lr"] = 0.2
    with pytest.raises(ValueError, match="The wrapped dictionary was modified outside the wrapper"):
        _write(m, str(tmp_path / "a"))
    m.cfg = tp.NoDependency(cfg)
    sizes[0] = 5
    with pytest.raises(ValueError, match="The wrapped list was modified outside the wrapper"):
        _write(m, str(tmp_path / "b"))


def test_an_outside_edit_is_remembered_after_it_is_undone_through_the_wrapper(tmp_path) -> None:
    vs = [tp.Variable(1.0)]
    m = tp.Module()
    m.vs = vs
    vs.append(tp.Variable(2.0))
    m.vs.append(tp.Variable(3.0))  # finds the outside append first
    del vs[1:]
    with pytest.raises(ValueError, match="modified outside the wrapper"):
        _write(m, str(tmp_path / "c"))


def test_an_outside_replacement_is_found_after_later_changes_through_the_wrapper(tmp_path) -> None:
    """Appends and item assignments check only the length; the save compares every element."""
    sizes = [1, 2, 3]
    m = tp.Module()
    m.sizes, m.w = sizes, tp.Variable(1.0)
    sizes[0] = 5  # same length
    m.sizes[1] = 7
    m.sizes.append(tp.Variable(2.0))
    assert sizes == [5, 7, 3, m.sizes[3]]
    with pytest.raises(ValueError, match="modified outside the wrapper"):
        _write(m, str(tmp_path / "c"))


def test_removing_a_plain_value_beside_a_trackable_cannot_renumber_it(tmp_path) -> None:
    """Before, ``del l[0]`` moved the variable from l/1 to l/0 without a word."""
    m = tp.Module()
    m.l = [1, tp.Variable(2.0)]
    del m.l[0]
    with pytest.raises(
        ValueError,
        match=r"A list element was replaced \(__setitem__, __setslice__\), deleted "
        r"\(__delitem__, __delslice__\), or moved \(sort\)",
    ):
        _write(m, str(tmp_path / "c"))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda l: l.__delitem__(slice(0, 1)),
        lambda l: l.remove(2),
        lambda l: l.pop(0),
        lambda l: l.insert(0, 0),
        lambda l: l.__setitem__(slice(1, 2), [5]),
        lambda l: l.clear(),
        lambda l: l.__imul__(0),
    ],
)
def test_every_non_append_mutation_of_a_list_holding_a_trackable_fails_the_save(mutate, tmp_path) -> None:
    m = tp.Module()
    m.l = [tp.Variable(1.0), 2, 3]
    mutate(m.l)
    with pytest.raises(ValueError, match="A list element was replaced"):
        _write(m, str(tmp_path / "c"))


def test_appends_in_every_spelling_are_appends(tmp_path) -> None:
    m = tp.Module()
    m.l = [tp.Variable(1.0), 2]
    m.l *= 2
    m.l += [tp.Variable(3.0)]
    m.l.extend([tp.Variable(4.0)])
    m.l.extend(m.l[:1])
    assert len(m.l) == 7 and m.l[2] is m.l[0] and m.l[6] is m.l[0]
    assert _children(m.l) == ["0", "2", "4", "5", "6"]
    assert _write(m, str(tmp_path / "c")) == [f"l/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in (0, 4, 5)]


def test_a_plain_list_may_change_freely_through_the_wrapper(tmp_path) -> None:
    m = tp.Module()
    m.l = [3, 1, 2]
    m.l.sort()
    m.l.reverse()
    del m.l[0]
    m.l[0] = tp.Variable(5.0)
    assert m.l == [m.l[0], 1]
    assert _write(m, str(tmp_path / "c")) == ["l/0/.ATTRIBUTES/VARIABLE_VALUE"]


def test_a_negative_index_names_the_element_by_its_position(tmp_path) -> None:
    m = tp.Module()
    m.l = [1, 2]
    m.l[-1] = tp.Variable(1.0)
    assert _children(m.l) == ["1"]
    path = tp.Checkpoint(root=m).write(str(tmp_path / "c"))
    fresh = tp.Module()
    fresh.l = [1, tp.Variable(0.0)]
    tp.Checkpoint(root=fresh).read(path).assert_consumed()
    assert fresh.l[1].numpy() == 1.0


def test_no_dependency_elements_are_stored_but_not_saved(tmp_path) -> None:
    hidden = tp.Variable(1.0)
    m = tp.Module()
    m.l = [tp.NoDependency(hidden), tp.Variable(2.0)]
    m.d = {"a": tp.Variable(3.0)}
    m.d[7] = tp.NoDependency(tp.Variable(4.0))  # a non-string key is fine for an untracked value
    assert m.l[0] is hidden and isinstance(m.d[7], tp.Variable)
    assert _write(m, str(tmp_path / "c")) == ["d/a/.ATTRIBUTES/VARIABLE_VALUE", "l/1/.ATTRIBUTES/VARIABLE_VALUE"]


def test_dict_changes_through_the_wrapper_are_tracked(tmp_path) -> None:
    m = tp.Module()
    m.d = {"a": tp.Variable(1.0)}
    m.d["a"] = replacement = tp.Variable(2.0)  # overwriting a trackable value is allowed
    m.d.setdefault("b", tp.Variable(3.0))
    m.d |= {"c": tp.Variable(4.0)}
    assert m.d.pop("missing", None) is None
    with pytest.raises(KeyError):
        m.d.pop("missing")
    path = tp.Checkpoint(root=m).write(str(tmp_path / "c"))
    assert tp.load_variable(path, "d/a/.ATTRIBUTES/VARIABLE_VALUE") == 2.0
    assert m.d["a"] is replacement and sorted(m.d) == ["a", "b", "c"]


def test_c_level_readers_see_the_contents(tmp_path) -> None:
    """json and numpy read list and dict subclasses' own slots; they hold what the wrapper last did."""
    m = tp.Module()
    m.sizes = [1, 2]
    m.cfg = {"lr": 0.5}
    m.sizes.append(3)
    m.cfg["depth"] = 4
    assert json.dumps(m.sizes) == "[1, 2, 3]" and json.loads(json.dumps(m.cfg)) == {"lr": 0.5, "depth": 4}
    assert np.array(m.sizes).tolist() == [1, 2, 3] and tuple(m.sizes) == (1, 2, 3) and sorted(m.sizes) == [1, 2, 3]
    assert str(m.sizes) == "ListWrapper([1, 2, 3])" and {**m.cfg} == {"lr": 0.5, "depth": 4}


def test_copies_are_new_wrappers_of_new_lists() -> None:
    m = tp.Module()
    v = tp.Variable(1.0)
    m.l = [v]
    m.d = {"v": v}
    for original in (m.l, m.d):
        shallow, deep = copy.copy(original), copy.deepcopy(original)
        assert type(shallow) is type(original) and shallow == original and shallow is not original
        assert type(deep) is type(original)
    m.l.copy().append(2)
    assert m.l == [v]


class Point(collections.namedtuple("Point", ["x", "y"])):
    @property
    def norm1(self) -> float:
        return float(self.x.numpy()) + self.y

    def scaled(self, k: int) -> tuple:
        return (self.x, self.y * k)


def test_a_tuple_wrapper_behaves_as_its_tuple() -> None:
    m = tp.Module()
    v, w = tp.Variable(1.0), tp.Variable(2.0)
    m.t = (v, 2)
    m.p = Point(w, 3)
    assert isinstance(m.t, tuple) and isinstance(m.p, Point) and isinstance(m.p, tp.Trackable)
    assert m.t + (4,) == (v, 2, 4) and (0,) + m.t == (0, v, 2) and type(m.t + (4,)) is tuple
    assert m.t * 2 == (v, 2, v, 2) and 2 * m.t == (v, 2, v, 2)
    t = m.t
    t += (5,)
    assert type(t) is tuple and t == (v, 2, 5) and m.t == (v, 2)
    t = m.t
    t *= 2
    assert type(t) is tuple and len(t) == 4
    assert m.t == (v, 2) and m.t != (v, 3) and m.t < (v, 3) and hash(m.t) == hash((v, 2))
    assert m.t.count(2) == 1 and m.t.index(2) == 1 and 2 in m.t and list(reversed(m.t)) == [2, v]
    assert m.p.x is w and m.p.norm1 == 5.0 and m.p.scaled(2) == (w, 6) and m.p._asdict() == {"x": w, "y": 3}
    assert _children(m.p) == ["x", "0"]


class OwnNew(collections.namedtuple("OwnNew", ["x", "y"])):
    def __new__(cls, x: object) -> Self:
        return super().__new__(cls, x, x)


def test_a_namedtuple_that_cannot_be_rebuilt_from_its_fields_fails_the_save(tmp_path) -> None:
    m = tp.Module()
    m.p = OwnNew(tp.Variable(1.0))
    assert m.p.x is m.p.y
    with pytest.raises(ValueError, match="not constructable from its _fields"):
        _write(m, str(tmp_path / "c"))


def test_restore_on_create_through_wrapper_appends(tmp_path) -> None:
    m = tp.Module()
    m.l = [tp.Variable(1.0)]
    m.d = {"k": tp.Variable(2.0)}
    path = tp.Checkpoint(root=m).write(str(tmp_path / "c"))
    fresh = tp.Module()
    layers: list = []
    table: dict = {}
    fresh.l, fresh.d = layers, table
    status = tp.Checkpoint(root=fresh).read(path)
    fresh.l.append(tp.Variable(0.0))
    fresh.d["k"] = tp.Variable(0.0)
    status.assert_consumed()
    assert layers[0].numpy() == 1.0 and table["k"].numpy() == 2.0


# Inherited as they are: comparisons that raise for dicts anyway, and object machinery.
_DICT_INHERITED = {
    "__ge__",
    "__gt__",
    "__le__",
    "__lt__",
    "__getattribute__",
    "__new__",
    "__init_subclass__",
    "__subclasshook__",
    "__class_getitem__",
    "fromkeys",
}


def test_every_dict_method_goes_to_the_storage() -> None:
    """A dict method a new Python adds would otherwise read or change the wrapper's own slots, not the user's dict."""
    from trackpoint._tracking.data_structures import DictWrapper

    inherited = [
        name
        for name in dir(dict)
        if name not in _DICT_INHERITED
        and callable(getattr(dict, name))
        and getattr(dict, name) is not getattr(object, name, None)
        and getattr(DictWrapper, name) == getattr(dict, name)
    ]
    assert inherited == []
