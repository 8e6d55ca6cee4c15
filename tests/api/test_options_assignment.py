"""``CheckpointOptions`` checks a value when it is assigned, not only when it is constructed."""

from __future__ import annotations

import copy
import pickle

import pytest

import trackpoint as tp
from trackpoint import sharding

_BAD = {
    "device-unknown-part": ("experimental_io_device", "foo:0", tp.errors.InvalidArgumentError),
    "device-not-a-string": ("experimental_io_device", 7, tp.errors.InvalidArgumentError),
    "callback-not-callable": ("experimental_write_callbacks", [1], tp.errors.InvalidCallbackError),
    "callback-two-arguments": ("experimental_write_callbacks", [lambda a, b: None], tp.errors.InvalidCallbackError),
    "callbacks-one-callable": ("experimental_write_callbacks", print, tp.errors.InvalidCallbackError),  # no list
    "callbacks-a-string": ("experimental_write_callbacks", "print", tp.errors.InvalidCallbackError),
    "sharding-a-string": ("experimental_sharding_callback", "x", tp.errors.InvalidArgumentError),
    "sharding-a-function": (
        "experimental_sharding_callback",
        lambda tensors: [tensors],
        tp.errors.InvalidArgumentError,
    ),
}


@pytest.mark.parametrize(("name", "value", "error"), list(_BAD.values()), ids=list(_BAD))
def test_a_bad_value_is_refused_on_assignment_as_in_the_constructor(name: str, value: object, error: type) -> None:
    with pytest.raises(error):
        tp.CheckpointOptions(**{name: value})
    options = tp.CheckpointOptions()
    before = getattr(options, name)
    with pytest.raises(error):
        setattr(options, name, value)
    assert getattr(options, name) == before  # nothing half-set


def test_the_refusals_are_the_tree_s_errors_and_the_builtins_tf_raises() -> None:
    options = tp.CheckpointOptions()
    with pytest.raises(ValueError, match="ShardingCallback"):  # TF raises ValueError here
        options.experimental_sharding_callback = "x"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        options.experimental_write_callbacks = print  # type: ignore[assignment]


def test_good_values_are_stored_as_the_constructor_stores_them() -> None:
    options = tp.CheckpointOptions()
    callbacks = [lambda: None]
    options.experimental_write_callbacks = callbacks
    callbacks.append(lambda: None)  # the options keep their own list, as when constructed
    assert len(options.experimental_write_callbacks) == 1
    options.experimental_write_callbacks = (print,)
    assert options.experimental_write_callbacks == [print]
    options.enable_async = 1  # type: ignore[assignment]
    options.experimental_skip_slot_variables = 0  # type: ignore[assignment]
    assert options.enable_async is True and options.experimental_skip_slot_variables is False
    policy = sharding.MaxShardSizePolicy(1 << 20)
    options.experimental_sharding_callback = policy
    options.experimental_io_device = "/job:localhost"
    assert options.experimental_sharding_callback is policy and options.experimental_io_device == "/job:localhost"
    options.experimental_sharding_callback = None
    options.experimental_write_callbacks = None
    assert repr(options) == "CheckpointOptions(experimental_io_device='/job:localhost', enable_async=True)"
    with pytest.raises(AttributeError):
        options.not_an_option = 1  # type: ignore[attr-defined]


def test_options_still_copy_and_pickle() -> None:
    options = tp.CheckpointOptions(
        experimental_io_device="CPU:0", enable_async=True, experimental_write_callbacks=[print]
    )
    for clone in (copy.copy(options), copy.deepcopy(options), pickle.loads(pickle.dumps(options))):
        assert repr(clone) == repr(options)
        assert clone.experimental_write_callbacks is not options.experimental_write_callbacks


def test_an_option_assigned_later_takes_effect(tmp_path) -> None:
    written: list[str] = []
    options = tp.CheckpointOptions()
    options.experimental_write_callbacks = [written.append]
    path = tp.Checkpoint(v=tp.Variable(1.0)).write(str(tmp_path / "ckpt"), options=options)
    assert written == [path]
