"""TF's partial-restore warning: a restore deleted with values no object took says which.

The warning comes when the restore's coordinator goes: when neither the status nor any
value waiting for restore-on-create holds it. Each test runs with the garbage collector
disabled, so "goes" means at the ``del``, with no cycle to wait for.
"""

from __future__ import annotations

import warnings
import weakref

import numpy as np

import trackpoint as tp
from tests.helpers import parse_warning


def _partial_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, UserWarning) and "deleted with unrestored values" in str(w.message)
    ]


def test_a_value_restored_into_an_object_that_ignores_it_warns_when_the_status_goes(tmp_path, no_gc) -> None:
    save_path = tp.Checkpoint(v1=tp.Variable(2.0), v2=tp.Variable(3.0)).save(str(tmp_path / "ckpt"))
    partial_root = tp.Checkpoint(v1=tp.Trackable(), v2=tp.Variable(0.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = partial_root.restore(save_path)
        assert partial_root.v2.numpy() == 3.0
        assert _partial_warnings(caught) == []  # the status still lives
        del status
        messages = _partial_warnings(caught)
        assert len(messages) == 1
        unmatched, unused = parse_warning(messages[0])
        assert unmatched == []
        assert unused == {"(root).v1": "VARIABLE_VALUE"}
        assert "expect_partial()" in messages[0] and save_path in messages[0]
        weak_root = weakref.ref(partial_root)
        del partial_root
        assert weak_root() is None
    assert len(_partial_warnings(caught)) == 1  # once


def test_a_dropped_checkpoint_frees_its_objects_and_names_values_and_slots_nothing_took(tmp_path, no_gc) -> None:
    v1, v2 = tp.Variable(2.0), tp.Variable(3.0)
    optimizer = tp.optimizers.Adam(0.1)
    optimizer.apply_gradients([(np.float32(0.0), v1)])  # slots m and v for v1
    save_path = tp.Checkpoint(v1=v1, v2=v2, optimizer=optimizer).save(str(tmp_path / "ckpt"))

    partial_root = tp.Checkpoint(v1=tp.Variable(0.0))
    weak_root, weak_v1 = weakref.ref(partial_root), weakref.ref(partial_root.v1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        partial_root.restore(save_path)  # v2 and the optimizer wait on the root; v1's slots on the optimizer
        assert partial_root.v1.numpy() == 2.0
        assert _partial_warnings(caught) == []
        del partial_root
        assert weak_root() is None and weak_v1() is None
        messages = _partial_warnings(caught)
    assert len(messages) == 1
    unmatched, unused = parse_warning(messages[0])
    assert "(root).v2" in unmatched
    assert "(root).optimizer's state 'm' for (root).v1" in unmatched
    assert "(root).optimizer's state 'v' for (root).v1" in unmatched
    assert "(root).v1" not in unmatched and unused == {}


def test_expect_partial_silences_both_kinds(tmp_path, no_gc) -> None:
    v1 = tp.Variable(2.0)
    optimizer = tp.optimizers.Adam(0.1)
    optimizer.apply_gradients([(np.float32(0.0), v1)])
    save_path = tp.Checkpoint(v1=v1, v2=tp.Variable(3.0), optimizer=optimizer).save(str(tmp_path / "ckpt"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.Checkpoint(v1=tp.Trackable(), v2=tp.Variable(0.0)).restore(save_path).expect_partial()
        partial_root = tp.Checkpoint(v1=tp.Variable(0.0))
        partial_root.restore(save_path).expect_partial()
        del partial_root
    assert _partial_warnings(caught) == []


def test_a_complete_restore_warns_nothing(tmp_path, no_gc) -> None:
    save_path = tp.Checkpoint(v1=tp.Variable(2.0)).save(str(tmp_path / "ckpt"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = tp.Checkpoint(v1=tp.Variable(0.0))
        target.restore(save_path).assert_consumed()
        del target
    assert _partial_warnings(caught) == []


def test_long_lists_are_cut_at_ten_per_kind(tmp_path, no_gc) -> None:
    class Empty(tp.Trackable):
        pass

    source = {f"v{i:02d}": tp.Variable(float(i)) for i in range(12)}
    extra = {f"x{i:02d}": tp.Variable(float(i)) for i in range(12)}
    save_path = tp.Checkpoint(**source, **extra).write(str(tmp_path / "ckpt"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.Checkpoint(**{name: Empty() for name in source}).read(save_path)
    (message,) = _partial_warnings(caught)
    unmatched, unused = parse_warning(message)
    assert "12 checkpoint value(s) were never restored" in message and "... and 2 more" in unmatched
    assert "12 restored object(s) did not take" in message and len(unused) == 11  # ten and "... and 2 more"
