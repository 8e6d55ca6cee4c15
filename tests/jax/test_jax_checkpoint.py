"""``trackpoint.jax``: pytrees keep their structure and container types, typed PRNG keys their kind,
a Flax NNX model with BatchNorm and Dropout and ``nnx.Optimizer(optax.adamw)`` resumes bit for bit,
and a restore is strict and all or nothing."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

import trackpoint as tp

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
optax = pytest.importorskip("optax")
nnx = pytest.importorskip("flax.nnx")
tpj = pytest.importorskip("trackpoint.jax")


class Pair(NamedTuple):
    w: jax.Array
    b: jax.Array


def _tree() -> dict:
    return {
        "pair": Pair(jnp.arange(6.0).reshape(2, 3), jnp.ones(3, jnp.bfloat16)),
        "listed": [
            jnp.int32(3),
            (jnp.zeros(2), jnp.arange(4, dtype=jnp.int64 if jax.config.x64_enabled else jnp.int32)),
        ],
        "key": jax.random.key(7),
        "rbg": jax.random.key(1, impl="rbg"),
        "opt": optax.adam(1e-3).init({"w": jnp.ones(2)}),
    }


def _spec(tree):
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _same(a, b) -> bool:
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        same_impl = jax.random.key_impl(a) == jax.random.key_impl(b)
        return bool(same_impl and np.array_equal(jax.random.key_data(a), jax.random.key_data(b)))
    return a.dtype == b.dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_a_pytree_comes_back_with_its_containers_and_keys(tmp_path) -> None:
    tree = _tree()
    path = tpj.Checkpoint(state=tree).save(str(tmp_path / "ckpt"))
    assert ("state/pair/w/.ATTRIBUTES/VARIABLE_VALUE", [2, 3]) in tp.list_variables(path)
    out = tpj.restore(path, {"state": _spec(tree)})["state"]
    assert type(out["pair"]) is Pair and type(out["listed"][1]) is tuple and type(out["opt"]) is tuple
    assert type(out["opt"][0]).__name__ == "ScaleByAdamState"
    assert str(jax.random.key_impl(out["rbg"])) == "rbg"
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tree)
    assert all(_same(a, b) for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(tree)))
    # The same through a Checkpoint of fresh values, and with a key restored into its live leaf.
    fresh = tpj.Checkpoint(state=jax.tree_util.tree_map(jnp.zeros_like, tree))
    fresh.restore(path).assert_consumed()
    assert all(
        _same(a, b) for a, b in zip(jax.tree_util.tree_leaves(fresh.state.value), jax.tree_util.tree_leaves(tree))
    )


def test_restore_is_strict_and_names_every_difference(tmp_path) -> None:
    tree = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3), "key": jax.random.key(0)}
    path = tpj.Checkpoint(params=tree).save(str(tmp_path / "ckpt"))
    wrong = {"params": {"w": jax.ShapeDtypeStruct((3, 2), jnp.float32), "key": jax.ShapeDtypeStruct((), jnp.uint32)}}
    wrong["params"]["extra"] = jax.ShapeDtypeStruct((1,), jnp.float32)
    with pytest.raises(tp.errors.InvalidArgumentError) as caught:
        tpj.restore(path, wrong)
    message = str(caught.value)
    assert "nothing was restored" in message and "params/extra" in message and "params/b" in message
    assert "params/w: float32[3, 2] wanted, float32[2, 3]" in message
    assert "params/key: uint32[] wanted, uint32[2] in the checkpoint" in message
    partial, report = tpj.restore(path, {"params": {"b": jax.ShapeDtypeStruct((3,), jnp.float32)}}, strict=False)
    assert report.unexpected == ("params/key", "params/w") and report.restored == {
        "params/b": "params/b/.ATTRIBUTES/VARIABLE_VALUE"
    }
    assert np.array_equal(partial["params"]["b"], np.zeros(3))


def test_a_typed_key_refuses_data_of_another_kind(tmp_path) -> None:
    path = tpj.Checkpoint(k=jax.random.key(3)).save(str(tmp_path / "ckpt"))
    with pytest.raises(tp.errors.InvalidArgumentError, match="rbg PRNG key, the checkpoint holds threefry2x32"):
        tpj.Checkpoint(k=jax.random.key(3, impl="rbg")).restore(path)
    plain = tpj.Checkpoint(k=jnp.zeros(2, jnp.uint32)).save(str(tmp_path / "plain"))
    with pytest.raises(tp.errors.InvalidArgumentError, match="plain"):
        tpj.restore(plain, {"k": jax.ShapeDtypeStruct((), jax.random.key(0).dtype)})


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.lin = nnx.Linear(3, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.out = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x):
        return self.out(self.drop(nnx.relu(self.bn(self.lin(x)))))


def _make(seed: int):
    model = Net(nnx.Rngs(seed, dropout=seed + 1))
    return model, nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)


@nnx.jit
def _step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
    optimizer.update(model, grads)
    return loss


def _flat(model, optimizer) -> list:
    return jax.tree_util.tree_leaves((nnx.state(model), nnx.state(optimizer)))


@pytest.mark.parametrize("enable_async", [False, True])
def test_an_nnx_model_resumes_bit_for_bit(tmp_path, enable_async: bool) -> None:
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.random((16, 3), np.float32)), jnp.asarray(rng.random((16, 2), np.float32))
    model, optimizer = _make(0)
    for _ in range(3):
        _step(model, optimizer, x, y)
    manager = tp.CheckpointManager(tpj.Checkpoint(model=model, optimizer=optimizer), str(tmp_path), max_to_keep=2)
    manager.save(options=tp.CheckpointOptions(enable_async=enable_async))
    uninterrupted = [float(_step(model, optimizer, x, y)) for _ in range(4)]
    manager.checkpoint.sync()
    resumed_model, resumed_optimizer = _make(5)  # other initial weights and random streams
    again = tp.CheckpointManager(tpj.Checkpoint(model=resumed_model, optimizer=resumed_optimizer), str(tmp_path), 2)
    assert again.restore_or_initialize() is not None
    resumed = [float(_step(resumed_model, resumed_optimizer, x, y)) for _ in range(4)]
    assert resumed == uninterrupted  # Dropout's masks and the step count included
    assert all(_same(a, b) for a, b in zip(_flat(model, optimizer), _flat(resumed_model, resumed_optimizer)))
