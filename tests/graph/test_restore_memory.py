"""A restore that creates tp.Variables (optimizer slots, restore-on-create) allocates each
value once: the value read is the variable's array, not copied into another (issue 39).

tracemalloc sees numpy's allocations: the peak during the restore is what the new variables
hold plus a bounded chunk, never a second full-size buffer. Nothing is timed.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import trackpoint as tp

MiB = 1 << 20
_N = 4 * MiB  # float32 elements: 16 MiB a tensor
_CHUNK = 6 * MiB  # the bounded read chunks and batches, with room; below one tensor


def _trained(tmp_path) -> str:
    m = tp.Module()
    m.w = tp.Variable(np.linspace(0, 1, _N, dtype=np.float32))
    opt = tp.optimizers.Adam(0.1)
    opt.apply_gradients([(np.ones(_N, np.float32), m.w)])
    return tp.Checkpoint(m=m, opt=opt).write(str(tmp_path / "ckpt"))


@pytest.mark.slow  # large slot values restored under tracemalloc: about a second
def test_slots_created_by_a_restore_hold_the_values_read_with_no_copy(tmp_path) -> None:
    prefix = _trained(tmp_path)
    m = tp.Module()
    m.w = tp.Variable(np.zeros(_N, np.float32))
    opt = tp.optimizers.Adam(0.1)
    tracemalloc.start()
    try:
        tp.Checkpoint(m=m, opt=opt).read(prefix).expect_partial()  # beta powers wait for the first step
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held >= 2 * _N * 4  # the two new slots, m and v
    assert peak < held + _CHUNK
    reader = tp.load_checkpoint(prefix)
    for name in ("m", "v"):
        stored = reader.get_tensor(f"m/w/.OPTIMIZER_SLOT/opt/{name}/.ATTRIBUTES/VARIABLE_VALUE")
        np.testing.assert_array_equal(opt.get_slot(m.w, name).numpy(), stored)
    np.testing.assert_array_equal(m.w.numpy(), reader.get_tensor("m/w/.ATTRIBUTES/VARIABLE_VALUE"))


def test_a_variable_shared_from_a_read_only_array_is_unchanged_by_a_restore_of_the_other(tmp_path) -> None:
    # Sharing read-only arrays (see infer_value) must not let a restore into one variable
    # change the other: the restore writes in place only into an array nothing else holds.
    prefix = tp.Checkpoint(v=tp.Variable(np.full(_N, 7.0, np.float32))).write(str(tmp_path / "seven"))
    a = tp.Variable(np.zeros(_N, np.float32))
    b = tp.Variable(a.numpy())
    assert np.shares_memory(a.numpy(), b.numpy())
    tp.Checkpoint(v=a).read(prefix).assert_consumed()
    np.testing.assert_array_equal(a.numpy(), 7.0)
    np.testing.assert_array_equal(b.numpy(), 0.0)
