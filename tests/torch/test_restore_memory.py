"""Large saves and restores of torch objects allocate no full-size numpy buffer (issue 39).

numpy advises huge pages for large arrays; where transparent huge pages are ``madvise``, each
fault of such memory may compact memory, which cost a restore into fresh objects seconds of
system time. So the restore reads straight into memory torch allocates (the parameters, and
state tensors the optimizer lacks) and numpy holds at most a bounded chunk at any moment.
tracemalloc sees every numpy allocation and none of torch's, so its peak during the call is
what numpy held: a full-size buffer for any one tensor cannot come back without this failing.
Nothing is timed.
"""

from __future__ import annotations

import pathlib
import tracemalloc
from collections.abc import Callable

import pytest
import torch

import trackpoint.torch as tpt
from trackpoint.errors import DataLossError

pytestmark = pytest.mark.slow  # tensors of tens of MiB saved and restored under tracemalloc: about a second each

MiB = 1 << 20
_TENSOR = 16 * MiB  # each large parameter; a full-size numpy buffer of one is this much
_BOUND = 8 * MiB  # what numpy may hold at once: the bounded read chunks and batches, with room


def _model(fresh: bool, dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    n = _TENSOR // torch.tensor([], dtype=dtype).element_size()
    make = torch.zeros if fresh else torch.randn
    model = torch.nn.Module()
    model.params = torch.nn.ParameterList([torch.nn.Parameter(make(n, dtype=dtype)) for _ in range(3)])
    model.small = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if not fresh:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
    return model, optimizer


def _numpy_peak(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def saved(request, tmp_path_factory) -> tuple[str, torch.nn.Module, torch.optim.Optimizer, torch.dtype]:
    model, optimizer = _model(fresh=False, dtype=request.param)
    prefix = str(tmp_path_factory.mktemp("large") / "ckpt")
    tpt.Checkpoint(model=model, optimizer=optimizer).write(prefix)
    return prefix, model, optimizer, request.param


def test_a_save_holds_no_full_size_numpy_buffer(saved, tmp_path) -> None:
    _, model, optimizer, _ = saved
    ckpt = tpt.Checkpoint(model=model, optimizer=optimizer)
    assert _numpy_peak(lambda: ckpt.write(str(tmp_path / "again"))) < _BOUND


def test_a_restore_into_fresh_objects_holds_no_full_size_numpy_buffer(saved) -> None:
    prefix, model, optimizer, dtype = saved
    fresh, fresh_optimizer = _model(fresh=True, dtype=dtype)
    ckpt = tpt.Checkpoint(model=fresh, optimizer=fresh_optimizer)
    assert _numpy_peak(lambda: ckpt.read(prefix).assert_consumed()) < _BOUND
    for a, b in zip(fresh.parameters(), model.parameters()):
        assert torch.equal(a, b)
    for param, fresh_param in zip(model.parameters(), fresh.parameters()):
        for name, value in optimizer.state[param].items():
            assert torch.equal(fresh_optimizer.state[fresh_param][name], value), name


def test_a_restore_into_existing_state_holds_no_full_size_numpy_buffer(saved) -> None:
    prefix, model, _, dtype = saved
    target, target_optimizer = _model(fresh=False, dtype=dtype)
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
    ckpt = tpt.Checkpoint(model=target, optimizer=target_optimizer)
    assert _numpy_peak(lambda: ckpt.read(prefix).assert_consumed()) < _BOUND
    for a, b in zip(target.parameters(), model.parameters()):
        assert torch.equal(a, b)


def test_load_state_dict_into_a_fresh_model_holds_no_full_size_numpy_buffer(saved) -> None:
    prefix, model, _, dtype = saved
    fresh, _ = _model(fresh=True, dtype=dtype)
    assert _numpy_peak(lambda: tpt.load_state_dict(fresh, prefix, strict=False)) < _BOUND
    for a, b in zip(fresh.parameters(), model.parameters()):
        assert torch.equal(a, b)


def test_a_damaged_new_state_tensor_is_never_left_in_the_optimizer(saved, tmp_path) -> None:
    # State tensors the optimizer lacks are made after the restore's values are in, each as an
    # object created later (see RestoreCoordinator.restore); one whose read fails must not be
    # left behind holding the uninitialized memory it was being read into.
    prefix, model, optimizer, dtype = saved
    for suffix in (".index", ".data-00000-of-00001"):
        (tmp_path / f"damaged{suffix}").write_bytes(pathlib.Path(prefix + suffix).read_bytes())
    data = tmp_path / "damaged.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # inside a state tensor: they are two thirds of the bytes
    data.write_bytes(bytes(raw))
    fresh, fresh_optimizer = _model(fresh=True, dtype=dtype)
    with pytest.raises(DataLossError, match="checksum mismatch.*OPTIMIZER_SLOT"):
        tpt.Checkpoint(model=fresh, optimizer=fresh_optimizer).read(str(tmp_path / "damaged"))
    held = 0
    for param, fresh_param in zip(model.parameters(), fresh.parameters()):
        for name, value in fresh_optimizer.state.get(fresh_param, {}).items():
            assert torch.equal(value, optimizer.state[param][name]), name
            held += 1
    assert held < sum(len(state) for state in optimizer.state.values())  # the damaged one is not there
