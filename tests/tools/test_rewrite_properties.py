"""Property: any move or drop of any subtree of a random object tree gives a checkpoint that restores
into the same edit applied to the objects, every value in its new place, and passes every check."""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.tools.test_rewrite import assert_consistent
from trackpoint._graph.keys import escape_local_name

NAMES = st.sampled_from(["a", "b", "x.y", "k/1", "..", "c.S"])
Tree = dict[str, Any]  # a name maps to a subtree or to a leaf value (an int)


@st.composite
def trees(draw: st.DrawFn, depth: int = 0) -> Tree:
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    out: Tree = {}
    for name in names:
        if depth < 2 and draw(st.booleans()):
            out[name] = draw(trees(depth + 1))
        else:
            out[name] = draw(st.integers(0, 1000))
    return out


def _paths(tree: Tree, base: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, value in tree.items():
        out.append((*base, name))
        if isinstance(value, dict):
            out += _paths(value, (*base, name))
    return out


def _objects(tree: Tree | int, zero: bool) -> Any:
    """Dicts of ``tp.Variable`` leaves (zero, or holding their value) shaped like ``tree``."""
    if not isinstance(tree, dict):
        return tp.Variable(np.full(2, 0 if zero else tree, np.int64))
    return {name: _objects(value, zero) for name, value in tree.items()}


def _get(tree: Tree, path: tuple[str, ...]) -> Any:
    for name in path:
        tree = tree[name]
    return tree


def _key(path: tuple[str, ...]) -> str:
    return "/".join(["model", *map(escape_local_name, path)])


@pytest.mark.slow  # 40 random rewrites (hypothesis): about a second
@settings(max_examples=40, deadline=None)
@given(tree=trees(), data=st.data())
def test_any_move_or_drop_restores_into_the_same_edit(tree: Tree, data: st.DataObject) -> None:
    # A directory removed again: mkdtemp() left 40 behind on every run.
    with tempfile.TemporaryDirectory() as directory:
        _edit_and_restore(directory, tree, data)


def _edit_and_restore(directory: str, tree: Tree, data: st.DataObject) -> None:
    module = tp.Module()
    module.tree = _objects(tree, zero=False)
    src = tp.Checkpoint(model=module).write(f"{directory}/src")
    paths = _paths(tree)
    moved = data.draw(st.sampled_from(paths))
    expected = {"tree": tree}
    drop = data.draw(st.booleans())
    if drop:
        rules: dict[str, Any] = {"drop": [_key(("tree", *moved))]}
        del _get(tree, moved[:-1])[moved[-1]]
    else:
        parents = [()] + [("tree", *p) for p in paths if isinstance(_get(tree, p), dict) and p[: len(moved)] != moved]
        parent = data.draw(st.sampled_from(parents))
        name = data.draw(NAMES.filter(lambda n: n not in _get(expected, parent)))
        rules = {"rename": {_key(("tree", *moved)): _key((*parent, name))}}
        value = _get(tree, moved[:-1]).pop(moved[-1])
        _get(expected, parent)[name] = value
    out = tp.rewrite(src, f"{directory}/out", **rules)
    assert_consistent(out)
    fresh = tp.Module()
    for name, value in expected.items():
        setattr(fresh, name, _objects(value, zero=True))  # names beside "tree" are plain Python names here
    tp.Checkpoint(model=fresh).read(out).assert_consumed()

    def check(objects: Any, values: Tree | int) -> None:
        if not isinstance(values, dict):
            np.testing.assert_array_equal(objects.numpy(), [values, values])
            return
        for name, value in values.items():
            check(objects[name], value)

    check({name: getattr(fresh, name) for name in expected}, expected)


@pytest.mark.slow  # runs the 40 random rewrites again: about a second
def test_the_property_test_leaves_no_directories_behind(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    test_any_move_or_drop_restores_into_the_same_edit()  # about a second for its 40 examples
    assert list(tmp_path.iterdir()) == []
