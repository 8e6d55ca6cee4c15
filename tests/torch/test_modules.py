"""trackpoint.torch modules and tensors: keys, round trips, tied weights, wrappers, dtypes, in-place restores."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
import torch

import trackpoint as tp
import trackpoint.torch as tpt
from trackpoint.errors import InvalidArgumentError


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)
        self.decoder = torch.nn.Linear(3, 4)
        self.register_buffer("scratch", torch.zeros(2), persistent=False)


def _randomize(module: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            if tensor.is_floating_point():
                tensor.copy_(torch.randn(tensor.shape, generator=generator))


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_a_module_is_saved_under_its_attribute_paths_as_tf_variables(tmp_path) -> None:
    model = Net()
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    keys = {k for k, _ in tp.list_variables(path)}
    assert {
        "model/encoder/weight/.ATTRIBUTES/VARIABLE_VALUE",
        "model/encoder/bias/.ATTRIBUTES/VARIABLE_VALUE",
        "model/norm/running_mean/.ATTRIBUTES/VARIABLE_VALUE",
        "model/norm/num_batches_tracked/.ATTRIBUTES/VARIABLE_VALUE",
        "model/decoder/weight/.ATTRIBUTES/VARIABLE_VALUE",
    } <= keys
    assert not any("scratch" in k for k in keys)  # non-persistent buffers are not saved
    np.testing.assert_array_equal(
        tp.load_variable(path, "model/encoder/weight/.ATTRIBUTES/VARIABLE_VALUE"), model.encoder.weight.detach().numpy()
    )


def test_a_restore_puts_back_every_parameter_and_buffer_into_the_same_memory(tmp_path) -> None:
    model = Net()
    _randomize(model, 1)
    saved = _state(model)
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    _randomize(model, 2)
    pointers = {k: v.data_ptr() for k, v in model.state_dict().items()}
    tpt.Checkpoint(model=model).read(path).assert_consumed()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0)
        assert value.data_ptr() == pointers[key], key


def test_a_large_parameter_is_read_straight_into_its_memory(tmp_path) -> None:
    model = torch.nn.Linear(1024, 512)  # 2 MiB of weights: above the in-place threshold
    _randomize(model, 3)
    saved = model.weight.detach().clone()
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    _randomize(model, 4)
    pointer = model.weight.data_ptr()
    view = model.weight.detach().numpy()  # a view of the parameter's memory, seen change in place
    tpt.Checkpoint(model=model).read(path).assert_consumed()
    assert model.weight.data_ptr() == pointer
    np.testing.assert_array_equal(view, saved.numpy())


def test_small_parameters_are_restored_into_their_memory_without_a_copy_of_the_state(tmp_path) -> None:
    """400 parameters of 64 KiB (25 MiB, each read in runs with its neighbours): the restore's
    own allocations (numpy and Python, which tracemalloc sees; torch's allocator it does not)
    stay within one run of scratch and the bookkeeping, not a second copy of the state."""
    import tracemalloc

    torch.manual_seed(0)
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(128, 128)) for _ in range(400)])
    saved = [p.detach().clone() for p in model]
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    with torch.no_grad():
        for p in model:
            p.zero_()
    pointers = [p.data_ptr() for p in model]
    tracemalloc.start()
    try:
        tpt.Checkpoint(model=model).read(path).assert_consumed()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak / 2**20:.1f} MiB"  # 4 MiB of scratch at most; the state is 25 MiB
    assert [p.data_ptr() for p in model] == pointers
    for p, value in zip(model, saved):
        torch.testing.assert_close(p.detach(), value, rtol=0, atol=0)


def test_a_shape_mismatch_names_the_path_and_changes_nothing(tmp_path) -> None:
    model = Net()
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    other = Net()
    other.decoder = torch.nn.Linear(3, 5)
    before = _state(other)
    with pytest.raises(InvalidArgumentError, match=r"model\.decoder\.weight.*float32\[5, 3\].*float32\[4, 3\]"):
        tpt.Checkpoint(model=other).read(path)
    for key, value in other.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)


def test_a_dtype_mismatch_is_refused_not_cast(tmp_path) -> None:
    path = tpt.Checkpoint(model=torch.nn.Linear(2, 2)).write(str(tmp_path / "ckpt"))
    with pytest.raises(InvalidArgumentError, match=r"float64\[2, 2\].*float32\[2, 2\]"):
        tpt.Checkpoint(model=torch.nn.Linear(2, 2).double()).read(path)


def test_a_tied_weight_is_one_node_stored_once_and_restored_under_either_name(tmp_path) -> None:
    model = Net()
    model.head = torch.nn.Linear(4, 3)
    model.head.weight = model.encoder.weight  # tied
    _randomize(model, 5)
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    keys = [k for k, _ in tp.list_variables(path) if k.endswith("weight/.ATTRIBUTES/VARIABLE_VALUE")]
    assert "model/encoder/weight/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert not any(k.startswith("model/head/weight") for k in keys)  # stored once
    with tp.CheckpointView(path) as view:
        model_id = view.children(0)["model"]
        encoder, head = view.children(model_id)["encoder"], view.children(model_id)["head"]
        assert view.children(encoder)["weight"] == view.children(head)["weight"]  # one node, two parents
    # A model that has only the second name restores it from the shared node.
    only_head = torch.nn.Module()
    only_head.head = torch.nn.Linear(4, 3)
    tpt.Checkpoint(model=only_head).read(path).expect_partial()
    torch.testing.assert_close(only_head.head.weight, model.encoder.weight, rtol=0, atol=0)


def test_views_of_one_storage_at_different_offsets_are_refused_with_both_names(tmp_path) -> None:
    model = torch.nn.Module()
    base = torch.zeros(8)
    model.register_buffer("whole", base)
    model.register_buffer("upper", base[4:])
    with pytest.raises(InvalidArgumentError, match=r"model\.whole and model\.upper share memory"):
        tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    assert not os.listdir(tmp_path)


@pytest.mark.slow  # torch.compile's wrapper: seconds
def test_data_parallel_and_compile_wrappers_add_nothing_to_the_keys(tmp_path) -> None:
    model = Net()
    _randomize(model, 6)
    plain = tpt.Checkpoint(model=model).write(str(tmp_path / "plain"))
    wrapped = tpt.Checkpoint(model=torch.nn.DataParallel(model)).write(str(tmp_path / "dp"))
    compiled = tpt.Checkpoint(model=torch.compile(model)).write(str(tmp_path / "compiled"))
    keys = sorted(k for k, _ in tp.list_variables(plain))
    assert sorted(k for k, _ in tp.list_variables(wrapped)) == keys
    assert sorted(k for k, _ in tp.list_variables(compiled)) == keys
    # and a checkpoint of the wrapped model restores into a plain one, and back
    fresh = Net()
    tpt.Checkpoint(model=fresh).read(wrapped).assert_consumed()
    torch.testing.assert_close(fresh.encoder.weight, model.encoder.weight, rtol=0, atol=0)
    other = Net()
    tpt.Checkpoint(model=torch.nn.DataParallel(other)).read(plain).assert_consumed()
    torch.testing.assert_close(other.decoder.bias, model.decoder.bias, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("dtype", "numpy_dtype"),
    [
        (torch.bfloat16, ml_dtypes.bfloat16),
        (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
        (torch.float8_e5m2, ml_dtypes.float8_e5m2),
        (torch.float16, np.float16),
        (torch.int64, np.int64),
        (torch.bool, np.bool_),
    ],
)
def test_dtypes_round_trip_bit_for_bit(tmp_path, dtype, numpy_dtype) -> None:
    source = torch.randn(5, 3).to(dtype) if dtype is not torch.int64 else torch.arange(15).reshape(5, 3)
    if dtype is torch.bool:
        source = torch.arange(15).reshape(5, 3) % 2 == 0
    model = torch.nn.Module()
    model.register_buffer("t", source.clone())
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    stored = tp.load_variable(path, "model/t/.ATTRIBUTES/VARIABLE_VALUE")
    assert stored.dtype == np.dtype(numpy_dtype)
    with torch.no_grad():
        model.t.zero_()
    tpt.Checkpoint(model=model).read(path).assert_consumed()
    assert (
        torch.equal(model.t.view(torch.uint8), source.view(torch.uint8))
        if source.element_size() == 1
        else (torch.equal(model.t, source))
    )


def test_a_dtype_tensorflow_lacks_is_refused_with_its_name(tmp_path) -> None:
    model = torch.nn.Module()
    model.register_buffer("q", torch.zeros(2, dtype=torch.complex32))
    with pytest.raises(InvalidArgumentError, match=r"complex32 has no TensorFlow checkpoint dtype") as raised:
        tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    assert raised.value.key == "model/q" and "cannot save model/q" in str(raised.value)


def test_a_repeat_save_names_the_tensor_that_became_unsaveable(tmp_path) -> None:
    """The second save reuses the first's layout (no walk): its refusal names the object by its
    path in the checkpoint all the same."""
    model = torch.nn.Module()
    model.register_buffer("q", torch.zeros(2))
    ckpt = tpt.Checkpoint(model=model)
    ckpt.write(str(tmp_path / "first"))
    model.q.data = torch.zeros(2, dtype=torch.complex32)
    with pytest.raises(InvalidArgumentError, match=r"complex32 has no TensorFlow checkpoint dtype") as raised:
        ckpt.write(str(tmp_path / "second"))
    assert raised.value.key == "model/q" and "cannot save model/q" in str(raised.value)
    assert not (tmp_path / "second.index").exists()


class WithExtra(torch.nn.Module):
    def __init__(self, extra: object) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.extra = extra

    def get_extra_state(self) -> object:
        return self.extra

    def set_extra_state(self, state: object) -> None:
        self.extra = state


@pytest.mark.parametrize("extra", [{"vocab": ["a", "b"], "n": 2}, b"\x00raw", torch.arange(3)])
def test_extra_state_is_saved_when_it_is_a_tensor_bytes_or_json(tmp_path, extra) -> None:
    path = tpt.Checkpoint(model=WithExtra(extra)).write(str(tmp_path / "ckpt"))
    fresh = WithExtra(None if not isinstance(extra, torch.Tensor) else torch.zeros(3, dtype=torch.int64))
    tpt.Checkpoint(model=fresh).read(path).assert_consumed()
    if isinstance(extra, torch.Tensor):
        assert torch.equal(fresh.extra, extra)
    else:
        assert fresh.extra == extra


def test_extra_state_that_could_only_be_pickled_is_refused(tmp_path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"get_extra_state\(\) returned a set.*never pickles"):
        tpt.Checkpoint(model=WithExtra({1, 2})).write(str(tmp_path / "ckpt"))


def test_an_async_save_holds_the_values_of_the_moment_it_returned(tmp_path) -> None:
    model = torch.nn.Linear(64, 64)
    _randomize(model, 7)
    saved = model.weight.detach().clone()
    ckpt = tpt.Checkpoint(model=model)
    path = ckpt.write(str(tmp_path / "ckpt"), tp.CheckpointOptions(enable_async=True))
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on at once, in place
    ckpt.sync()
    np.testing.assert_array_equal(tp.load_variable(path, "model/weight/.ATTRIBUTES/VARIABLE_VALUE"), saved.numpy())


def test_a_submodule_created_after_the_restore_receives_its_values_when_registered(tmp_path) -> None:
    from trackpoint.torch import _hooks

    model = Net()
    _randomize(model, 8)
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    partial = torch.nn.Module()
    partial.encoder = torch.nn.Linear(4, 3)
    status = tpt.Checkpoint(model=partial).read(path)
    assert _hooks.installed()
    assert status.report().pending  # the decoder and norm wait
    partial.decoder = torch.nn.Linear(3, 4)
    torch.testing.assert_close(partial.decoder.weight, model.decoder.weight, rtol=0, atol=0)
    partial.norm = torch.nn.BatchNorm1d(3)
    torch.testing.assert_close(partial.norm.running_var, model.norm.running_var, rtol=0, atol=0)
    assert not _hooks.installed()  # nothing waits any more: the hooks are gone
    status.assert_consumed()


def test_non_contiguous_conjugate_and_negative_views_are_saved_as_their_values(tmp_path) -> None:
    model = torch.nn.Module()
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    model.register_buffer("transposed", base.t())  # a strided view, not contiguous
    model.register_buffer("conjugate", z.conj())  # a conjugate bit, which numpy() refuses
    model.register_buffer("negative", torch._neg_view(z.clone()))  # a negative bit, likewise
    model.register_buffer("requires_grad", torch.ones(2, requires_grad=True))
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    for name in ("transposed", "conjugate", "negative", "requires_grad"):
        stored = tp.load_variable(path, f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE")
        np.testing.assert_array_equal(stored, getattr(model, name).detach().resolve_conj().resolve_neg().numpy())


def test_a_conjugate_view_beside_its_base_is_refused_as_two_values_of_one_memory(tmp_path) -> None:
    model = torch.nn.Module()
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    model.register_buffer("z", z)
    model.register_buffer("zbar", z.conj())  # same place, shape and stride: only the bit differs
    with pytest.raises(InvalidArgumentError, match=r"model\.z and model\.zbar share memory"):
        tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))


def _lazy() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.LazyBatchNorm1d())


def test_a_lazy_module_is_materialized_from_the_checkpoints_shapes(tmp_path) -> None:
    trained = _lazy()
    trained(torch.randn(5, 4))  # the first forward gives the shapes
    _randomize(trained, 3)
    trained[1].running_var.abs_()  # a variance, so the outputs compared are numbers
    path = tpt.Checkpoint(model=trained).write(str(tmp_path / "ckpt"))

    fresh = _lazy()
    weight = fresh[0].weight
    assert torch.nn.parameter.is_lazy(weight)
    tpt.Checkpoint(model=fresh).read(path).assert_consumed()
    assert fresh[0].weight is weight and not torch.nn.parameter.is_lazy(weight)  # the same Parameter, materialized
    for key, value in trained.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[key], value, rtol=0, atol=0)
    x = torch.randn(2, 4)
    torch.testing.assert_close(fresh.eval()(x), trained.eval()(x), rtol=0, atol=0)  # and the forward keeps them
    assert type(fresh[0]) is torch.nn.Linear


def test_an_uninitialized_lazy_tensor_is_not_saved_and_a_dtype_mismatch_is_refused(tmp_path) -> None:
    path = tpt.Checkpoint(model=_lazy()).write(str(tmp_path / "lazy"))
    saved = {k.split("/")[2] for k, _ in tp.list_variables(path) if k.startswith("model/")}
    assert saved == {"num_batches_tracked"}  # the one tensor of the lazy modules that is not lazy

    trained = _lazy().double()
    trained(torch.randn(5, 4, dtype=torch.float64))
    path = tpt.Checkpoint(model=trained).write(str(tmp_path / "ckpt"))
    fresh = _lazy()
    with pytest.raises(InvalidArgumentError, match=r"tensor 'weight' is an uninitialized float32 tensor.*float64"):
        tpt.Checkpoint(model=fresh).read(path)
    assert torch.nn.parameter.is_lazy(fresh[0].weight)  # all or nothing: still uninitialized


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this machine has none")
def test_cuda_tensors_go_through_host_memory_in_bounded_chunks(tmp_path, monkeypatch) -> None:
    from trackpoint.torch import _tensors

    monkeypatch.setattr(_tensors, "DEVICE_CHUNK_BYTES", 1 << 16)  # many chunks for a 1 MiB weight
    model = torch.nn.Linear(512, 512).cuda()
    saved = model.weight.detach().cpu().clone()
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(tp.load_variable(path, "model/weight/.ATTRIBUTES/VARIABLE_VALUE"), saved.numpy())
    with torch.no_grad():
        model.weight.zero_()
    tpt.Checkpoint(model=model).read(path).assert_consumed()
    assert torch.equal(model.weight.cpu(), saved)


def test_the_torch_checkpoint_refuses_aliases_through_the_documented_hook_alone(tmp_path) -> None:
    """``tpt.Checkpoint`` plugs its aliasing check into the save pipeline's ``before_write`` step
    (``_tp_before_write``); it overrides no other method of ``tp.Checkpoint``."""
    own = {name for name in vars(tpt.Checkpoint) if callable(vars(tpt.Checkpoint)[name])}
    assert own & set(dir(tp.Checkpoint)) == {"__init__", "_tp_before_write"}
    model = torch.nn.Module()
    model.whole = torch.nn.Parameter(torch.zeros(4))
    model.part = torch.nn.Parameter(model.whole.data[1:])
    with pytest.raises(InvalidArgumentError, match="share memory"):
        tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    assert list(tmp_path.iterdir()) == []
