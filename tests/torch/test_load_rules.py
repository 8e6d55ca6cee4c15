"""``trackpoint.torch.load_state_dict`` with ``tp.convert``'s name rules: a TF1 checkpoint (keys only)
or an object-based one into a torch module in one call, all or nothing, with the usual report."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp

torch = pytest.importorskip("torch")
tpt = pytest.importorskip("trackpoint.torch")

KERNEL = np.arange(6, dtype=np.float32).reshape(2, 3)  # TF's [in, out]
BIAS = np.array([1.0, 2.0, 3.0], np.float32)


def _tf1(path: str) -> str:
    """A TF1 Saver's layout: global names as keys, an Adam slot and global_step beside the weights."""
    return tp.save_tensors(
        path,
        {
            "net/dense/kernel": KERNEL,
            "net/dense/kernel/Adam": KERNEL * 0,
            "net/dense/bias": BIAS,
            "global_step": np.int64(5),
        },
    )


def _model() -> torch.nn.Module:
    model = torch.nn.Sequential()
    model.add_module("dense", torch.nn.Linear(2, 3))
    return model


RULES = {"drop": [r"Adam$", r"^global_step$"], "transpose": r"kernel$", "rename": [r"^net\.=", r"kernel$=weight"]}


def test_a_tf1_checkpoint_loads_into_a_module_in_one_call(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    model = _model()
    result = tpt.load_state_dict(model, prefix, **RULES)
    assert result == tpt.IncompatibleKeys([], [], [])
    assert np.array_equal(model.dense.weight.detach().numpy(), KERNEL.T)  # transposed to torch's [out, in]
    assert np.array_equal(model.dense.bias.detach().numpy(), BIAS)
    # The same without the rule that strips "net": the dotted key prefix does it.
    other = _model()
    rules = {**RULES, "rename": [r"kernel$=weight"]}
    assert tpt.load_state_dict(other, prefix, prefix="net", **rules) == tpt.IncompatibleKeys([], [], [])
    assert np.array_equal(other.dense.weight.detach().numpy(), KERNEL.T)


def test_strict_names_every_difference_and_loads_nothing(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    model = _model()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    untransposed = {**RULES, "transpose": None}
    with pytest.raises(tp.errors.InvalidArgumentError) as caught:
        tpt.load_state_dict(model, prefix, **{**untransposed, "drop": [r"Adam$"]})
    message = str(caught.value)
    assert "nothing was loaded" in message and "global_step" in message
    assert "dense.weight: float32[3, 2] here, float32[2, 3] in the checkpoint" in message
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    # Not strict: what fits is loaded, the rest reported.
    result = tpt.load_state_dict(model, prefix, strict=False, **untransposed)
    assert result == tpt.IncompatibleKeys([], [], ["dense.weight"])
    assert np.array_equal(model.dense.bias.detach().numpy(), BIAS)
    assert torch.equal(model.dense.weight, before["dense.weight"])


def test_only_and_bad_rules(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    model = _model()
    result = tpt.load_state_dict(model, prefix, strict=False, only=r"bias$", rename=r"^net\.=")
    assert result == tpt.IncompatibleKeys(["dense.weight"], [], [])
    with pytest.raises(tp.errors.InvalidArgumentError, match="'net.dense.bias' and 'net.dense.kernel' would both"):
        tpt.load_state_dict(model, prefix, drop=["Adam", "global_step"], rename=r"(bias|kernel)$=x")
    with pytest.raises(tp.errors.InvalidArgumentError, match="only 2-D tensors can be transposed"):
        tpt.load_state_dict(model, prefix, transpose="bias")
    with pytest.raises(tp.errors.InvalidArgumentError, match="has no '='"):
        tpt.load_state_dict(model, prefix, rename="net")


def test_rules_on_an_object_based_checkpoint(tmp_path) -> None:
    keras_like = tp.Module()  # TF's layout: dense/kernel [in, out]
    keras_like.dense = tp.Module()
    keras_like.dense.kernel = tp.Variable(KERNEL)
    keras_like.dense.bias = tp.Variable(BIAS)
    path = tp.Checkpoint(model=keras_like).write(str(tmp_path / "ckpt"))
    model = _model()
    result = tpt.load_state_dict(model, path, transpose=r"kernel$", rename=r"kernel$=weight")
    assert result == tpt.IncompatibleKeys([], [], [])
    assert np.array_equal(model.dense.weight.detach().numpy(), KERNEL.T)
    assert np.array_equal(model.dense.bias.detach().numpy(), BIAS)


def test_a_damaged_value_loads_nothing(tmp_path) -> None:
    prefix = _tf1(str(tmp_path / "model.ckpt"))
    data = tmp_path / "model.ckpt.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF  # the kernel, first in the file
    data.write_bytes(bytes(raw))
    model = _model()
    before = model.dense.bias.detach().clone()
    with pytest.raises(tp.errors.DataLossError, match="net/dense/kernel"):
        tpt.load_state_dict(model, prefix, **RULES)
    assert torch.equal(model.dense.bias.detach(), before)
