"""Saves reuse the previous layout only while nothing structural changed; the bytes always equal a fresh save."""

from __future__ import annotations

import filecmp

import numpy as np

import trackpoint as tp
from trackpoint._storage import naming


def _same_files(a: str, b: str) -> bool:
    return all(
        filecmp.cmp(name(a), name(b), shallow=False)
        for name in (naming.index_filename, lambda p: naming.data_filename(p, 0, 1))
    )


def test_every_kind_of_structural_change_is_seen(tmp_path, reuse) -> None:
    root = tp.Module()
    root.w = tp.Variable([1.0, 2.0])
    root.items = [tp.Variable(1)]
    root.table = {"a": tp.Variable(2)}
    root.pair = (tp.Variable(3.0), tp.Variable(4.0))
    opt = tp.optimizers.SGD(0.1, momentum=0.9)
    ckpt = tp.Checkpoint(model=root, opt=opt)  # reused: its saves may replay the previous layout
    reference = tp.Checkpoint(model=root, opt=opt)  # always walks the graph afresh
    ckpt.write(str(tmp_path / "first"))
    reused = []

    mutations = [
        lambda: root.w.assign([5.0, 6.0]),  # values only: the layout is replayed
        lambda: root.items.append(tp.Variable(7)),
        lambda: setattr(root, "extra", tp.Variable(8.0)),
        lambda: root.table.update(b=tp.Variable(9)),
        lambda: root.table.pop("a"),  # still tracked, as after TF's del: replayed
        lambda: delattr(root, "extra"),
        lambda: setattr(root, "w", tp.Variable([0.5, 0.5])),  # replaced under the same name
        lambda: opt.apply_gradients([(np.ones(2, np.float32), root.w)]),  # a slot appears
        lambda: root.pair[0].assign(9.0),  # values only again
        lambda: root.items.__setitem__(1, 5),  # non-append mutation: save must fail
    ]
    for step, mutate in enumerate(mutations):
        mutate()
        ours, fresh = str(tmp_path / f"reused-{step}"), str(tmp_path / f"fresh-{step}")
        reuse.clear()
        try:
            ckpt.write(ours)
        except tp.errors.InvalidArgumentError:
            assert step == len(mutations) - 1
            assert reuse.saves() == [
                (
                    "walking the objects: the previous save's layout does not hold: the structure "
                    "changed since (an object gained, lost or replaced a child or a slot)"
                )
            ]
            continue
        said = reuse.saves()
        reused += [step] if said == ["reusing the previous save's layout"] else []
        assert len(said) == 1 and (step in reused or "the structure changed since" in said[0]), said
        reference._tp_saving.layout = None
        reference.write(fresh)
        assert _same_files(ours, fresh), step
    assert reused == [0, 4, 8]  # the three steps that leave the layout as it was


def test_computed_children_are_walked_every_time(tmp_path, reuse) -> None:
    class Dynamic(tp.Trackable):
        def __init__(self) -> None:
            self.count = 1
            self.vars = [tp.Variable(float(i)) for i in range(5)]

        def _trackable_children(self) -> dict:
            return {f"v{i}": v for i, v in enumerate(self.vars[: self.count])}

    dynamic = Dynamic()
    ckpt = tp.Checkpoint(d=dynamic)
    ckpt.write(str(tmp_path / "one"))
    assert reuse.saves() == [
        "walking the objects: no previous save of them",
        "the save layout is not kept: Dynamic computes its own children (_trackable_children)",
    ]
    dynamic.count = 3  # no tracking call reports this
    ckpt.write(str(tmp_path / "three"))
    keys = [k for k, _ in tp.list_variables(str(tmp_path / "three"))]
    assert keys.count("d/v2/.ATTRIBUTES/VARIABLE_VALUE") == 1


def test_renamed_tensors_are_noticed(tmp_path, reuse) -> None:
    class Renaming(tp.Trackable):
        def __init__(self) -> None:
            self.name = "a"

        def _serialize_to_tensors(self) -> dict:
            return {self.name: np.int32(1)}

    obj = Renaming()
    ckpt = tp.Checkpoint(r=obj)
    ckpt.write(str(tmp_path / "a"))
    obj.name = "b"
    reuse.clear()
    ckpt.write(str(tmp_path / "b"))
    assert reuse.saves() == [
        (
            "walking the objects: the previous save's layout does not hold: a Renaming now names its "
            "tensors ['b'], not ['a']"
        )
    ]
    assert "r/.ATTRIBUTES/b" in dict(tp.list_variables(str(tmp_path / "b")))
