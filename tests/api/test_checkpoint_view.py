"""tp.CheckpointView: TF's documented example literally, plus tree and checkpoint-to-checkpoint diff."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp


class SimpleModule(tp.Module):
    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        self.a_var = tp.Variable(5.0)
        self.b_var = tp.Variable(4.0)
        self.vars = [tp.Variable(1.0), tp.Variable(2.0)]


@pytest.fixture
def save_path(tmp_path) -> str:
    root = SimpleModule(name="root")
    leaf = root.leaf = SimpleModule(name="leaf")
    leaf.leaf3 = tp.Variable(6.0, name="leaf3")
    leaf.leaf4 = tp.Variable(7.0, name="leaf4")
    return tp.Checkpoint(root).save(str(tmp_path / "tf_ckpts"))


def test_documented_example(save_path: str) -> None:
    view = tp.CheckpointView(save_path)
    assert view.children(0) == {"a_var": 1, "b_var": 2, "vars": 3, "leaf": 4, "root": 0, "save_counter": 5}
    assert view.descendants() == list(range(15))

    root2 = SimpleModule(name="root")
    leaf2 = root2.leaf2 = SimpleModule(name="leaf2")
    leaf2.leaf3 = tp.Variable(6.0)
    leaf2.leaf4 = tp.Variable(7.0)
    matched, only_in_checkpoint, only_in_trackable = view.diff(root2)
    assert sorted(matched) == [0, 1, 2, 3, 6, 7]
    assert matched[1] is root2.a_var and matched[3] is root2.vars and matched[7] is root2.vars[1]
    assert only_in_checkpoint == [4, 5, 8, 9, 10, 11, 12, 13, 14]
    assert len(only_in_trackable) == 8 and only_in_trackable[0] is leaf2
    assert view.match(root2) == matched


def test_directory_missing_and_plain_bundle(tmp_path, save_path: str) -> None:
    assert tp.CheckpointView(str(tmp_path)).children(0)["a_var"] == 1  # through the state file
    with pytest.raises(tp.errors.NotFoundError):
        tp.CheckpointView(str(tmp_path / "nope"))
    tp.save_tensors(str(tmp_path / "plain"), {"x": np.zeros(2)})
    with pytest.raises(ValueError, match="does not appear to be object-based"):
        tp.CheckpointView(str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="no node 99"):
        tp.CheckpointView(save_path).children(99)


def _trained(tmp_path, name: str, scale: float = 1.0, extra: bool = False) -> str:
    model = tp.Module()
    model.w = tp.Variable(np.arange(6, dtype=np.float32).reshape(2, 3) * scale, name="w")
    if extra:
        model.extra = tp.Variable([1, 2])
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.ones((2, 3), np.float32) * scale, model.w)])
    return tp.Checkpoint(model=model, optimizer=adam).write(str(tmp_path / name))


def test_tree_shows_slots_under_their_variable(tmp_path) -> None:
    lines = tp.CheckpointView(_trained(tmp_path, "a")).tree().splitlines()
    assert lines[0] == "(root)"
    w = lines.index("    w  float32[2,3]  24 B")
    assert lines[w + 1] == "      [slot 'm' of optimizer]  float32[2,3]  24 B"
    assert lines[w + 2] == "      [slot 'v' of optimizer]  float32[2,3]  24 B"
    assert "    beta1_power  float32[]  4 B" in lines


def test_diff_of_two_checkpoints(tmp_path) -> None:
    a = tp.CheckpointView(_trained(tmp_path, "a"))
    assert a.diff(_trained(tmp_path, "same")).equal
    changed = a.diff(_trained(tmp_path, "b", scale=1.001))
    paths = {(c.path, c.kind) for c in changed.changed}
    assert ("(root).model.w", "value") in paths
    assert ("(root).optimizer's state 'm' for (root).model.w", "value") in paths
    worst = changed.changed[0]
    assert worst.max_abs_diff == pytest.approx(0.005, rel=1e-3)
    assert a.diff(tp.CheckpointView(str(tmp_path / "b")), rtol=1e-2).equal
    structural = a.diff(_trained(tmp_path, "c", extra=True))
    assert structural.added == ("(root).model.extra",) and not structural.removed and not structural.changed


def test_diff_reports_dtype_and_shape_changes(tmp_path) -> None:
    first = tp.Checkpoint(x=tp.Variable([1.0, 2.0]), y=tp.Variable([1.0])).write(str(tmp_path / "a"))
    second = tp.Checkpoint(x=tp.Variable([1, 2]), y=tp.Variable([1.0, 2.0])).write(str(tmp_path / "b"))
    result = tp.CheckpointView(first).diff(second)
    kinds = {c.path: (c.kind, c.detail) for c in result.changed}
    assert kinds == {"(root).x": ("dtype", "float32 -> int32"), "(root).y": ("shape", "[1] -> [2]")}
