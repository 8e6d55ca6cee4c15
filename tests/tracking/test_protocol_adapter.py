"""An adapter written from ``trackpoint.protocol`` alone, for a toy framework that keeps its own arrays.

The framework (``Layer``, ``Momentum``) knows nothing of trackpoint. The adapter (``LayerNode``,
``ArrayNode``, ``MomentumNode``) puts it into the object graph using only the public
``trackpoint`` API and ``trackpoint.protocol``; the last test pins that with an AST check. It
saves TF-compatible files (the same bytes as the equivalent ``tp.Module``), restores into the
layers' own memory, restores a parameter created after the restore, refuses a bad checkpoint
with nothing changed, snapshots for async saves, hears of each finished save, and keeps
optimizer state as slot variables.
"""

from __future__ import annotations

import ast
import weakref
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import trackpoint as tp
from trackpoint import protocol

MiB = 1 << 20

# -- the foreign framework ------------------------------------------------------------------


class Layer:
    """Parameters (named numpy arrays it updates in place) and sub-layers; ``on_add`` hooks see new parameters."""

    on_add: ClassVar[list[Any]] = []

    def __init__(self, **params: np.ndarray) -> None:
        self.params: dict[str, np.ndarray] = {}
        self.layers: dict[str, Layer] = {}
        for name, value in params.items():
            self.add(name, value)

    def add(self, name: str, value: np.ndarray) -> None:
        for hook in Layer.on_add:
            hook(self, name, value)  # may refuse (raise): the parameter is then not added
        self.params[name] = value


class Momentum:
    """An optimizer keeping one momentum array per parameter array (by identity)."""

    def __init__(self, lr: float) -> None:
        self.lr = lr
        self.momentum: dict[int, np.ndarray] = {}

    def step(self, params: list[np.ndarray]) -> None:
        for p in params:
            m = self.momentum.setdefault(id(p), np.zeros_like(p))
            m += 1.0
            p -= self.lr * m


# -- the adapter: trackpoint and trackpoint.protocol only -------------------------------------

_nodes: dict[int, tuple[weakref.ref[Any], tp.Trackable]] = {}


def _node_of(obj: Any, make: Any) -> Any:
    """One node per framework object, for as long as it lives."""
    entry = _nodes.get(id(obj))
    if entry is None or entry[0]() is not obj:
        entry = (weakref.ref(obj), make(obj))
        _nodes[id(obj)] = entry
    return entry[1]


class ArrayNode(tp.Trackable):
    """One array, saved as a variable and restored into its own memory (a TensorOwner)."""

    def __init__(self, array: np.ndarray, name: str) -> None:
        self.array = array
        self.name = name
        self.taken_in_place = 0

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return (protocol.VARIABLE_VALUE,)

    def _checkpoint_full_name(self) -> str:
        return self.name

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {protocol.VARIABLE_VALUE: self.array}  # no copy: a save reads the array itself

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {protocol.VARIABLE_VALUE: self.array}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> np.ndarray:
        value = np.asarray(tensors[protocol.VARIABLE_VALUE])
        if value.shape != self.array.shape or value.dtype != self.array.dtype:
            raise tp.errors.InvalidArgumentError(
                f"{self.name} is {self.array.dtype}{self.array.shape}, not {value.dtype}{value.shape}"
            )
        return value

    def _tp_take_restored(self, checked: np.ndarray) -> None:
        if checked is self.array:
            self.taken_in_place += 1  # the restore reads the bytes into it right after this
        else:
            self.array[...] = checked


def array_node(array: np.ndarray, name: str) -> ArrayNode:
    return _node_of(array, lambda a: ArrayNode(a, name))


class LayerNode(tp.Trackable):
    """A layer: its parameters, then its sub-layers, computed from the layer each time."""

    def __init__(self, layer: Layer) -> None:
        self.layer = layer
        self.saves = 0

    def _trackable_children(self) -> dict[str, tp.Trackable]:
        children: dict[str, tp.Trackable] = {name: array_node(a, name) for name, a in self.layer.params.items()}
        children.update((name, layer_node(sub)) for name, sub in self.layer.layers.items())
        return children

    def _lookup_dependency(self, name: str) -> tp.Trackable | None:
        if name in self.layer.params:
            return array_node(self.layer.params[name], name)
        sub = self.layer.layers.get(name)
        return layer_node(sub) if sub is not None else None

    def _tp_after_save(self) -> None:
        self.saves += 1


def layer_node(layer: Layer) -> LayerNode:
    return _node_of(layer, LayerNode)


def _restore_on_add(layer: Layer, name: str, value: np.ndarray) -> None:
    node = _nodes.get(id(layer))
    if node is not None and node[1]._tp_has_pending(name):
        node[1]._handle_deferred_dependencies(name, array_node(value, name))


Layer.on_add.append(_restore_on_add)


class MomentumNode(tp.Trackable):
    """The optimizer: its learning rate as a tensor, its momentum arrays as slot variables."""

    def __init__(self, optimizer: Momentum, params: list[ArrayNode]) -> None:
        self.optimizer = optimizer
        self.params = params

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return ("lr",)

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {"lr": np.float64(self.optimizer.lr)}

    def _restore_from_tensors(self, restored_tensors: dict[str, Any]) -> None:
        self.optimizer.lr = float(restored_tensors["lr"])

    def get_slot_names(self) -> list[str]:
        return ["momentum"] if self.optimizer.momentum else []

    def get_slot(self, var: Any, name: str) -> tp.Trackable | None:
        array = self.optimizer.momentum.get(id(var.array)) if isinstance(var, ArrayNode) else None
        return array_node(array, f"{var.name}/momentum") if array is not None and name == "momentum" else None

    def _create_or_restore_slot_variable(
        self, position: protocol.PendingRestore, variable: Any, slot_name: str
    ) -> tp.Trackable | None:
        slot = self.get_slot(variable, slot_name)
        if slot is not None or not isinstance(variable, ArrayNode) or not position.is_simple_variable():
            return slot
        value = np.array(position.simple_variable_value())  # a writable copy the optimizer updates
        self.optimizer.momentum[id(variable.array)] = value
        node = array_node(value, f"{variable.name}/momentum")
        position.mark_restored(node)  # it holds the restore's value already
        return node


# -- the tests ------------------------------------------------------------------------------


def _model() -> Layer:
    model = Layer(bias=np.zeros(4, np.float32))
    model.layers["dense"] = Layer(kernel=np.arange(12, dtype=np.float32).reshape(3, 4), big=np.zeros(MiB, np.float32))
    return model


def test_the_adapter_implements_the_protocols() -> None:
    model = _model()
    node = layer_node(model)
    kernel = node._lookup_dependency("dense")._lookup_dependency("kernel")  # type: ignore[union-attr]
    assert isinstance(node, protocol.Parent) and isinstance(node, protocol.AfterSave)
    assert isinstance(kernel, protocol.TensorOwner) and isinstance(kernel, protocol.Saveable)
    assert isinstance(MomentumNode(Momentum(0.1), []), protocol.SlotOwner)


def test_a_save_is_the_same_files_as_the_equivalent_tp_module(tmp_path) -> None:
    model = _model()
    node = layer_node(model)
    path = tp.Checkpoint(model=node).write(str(tmp_path / "adapter" / "c"))
    assert node.saves == 1  # told once every object offered its tensors

    twin = tp.Module()
    twin.bias = tp.Variable(model.params["bias"], name="bias")
    twin.dense = tp.Module()
    twin.dense.kernel = tp.Variable(model.layers["dense"].params["kernel"], name="kernel")
    twin.dense.big = tp.Variable(model.layers["dense"].params["big"], name="big")
    reference = tp.Checkpoint(model=twin).write(str(tmp_path / "module" / "c"))
    for suffix in (".index", ".data-00000-of-00001"):
        assert Path(path + suffix).read_bytes() == Path(reference + suffix).read_bytes()
    reader = tp.load_checkpoint(path)
    np.testing.assert_array_equal(
        reader.get_tensor("model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"), model.layers["dense"].params["kernel"]
    )


def test_a_restore_reads_into_the_layers_own_memory(tmp_path) -> None:
    model = _model()
    path = tp.Checkpoint(model=layer_node(model)).write(str(tmp_path / "c"))
    big, kernel = model.layers["dense"].params["big"], model.layers["dense"].params["kernel"]
    big[...] = -1.0
    kernel[...] = -1.0
    tp.Checkpoint(model=layer_node(model)).read(path).assert_consumed()
    assert model.layers["dense"].params["big"] is big and (big == 0).all()
    np.testing.assert_array_equal(kernel, np.arange(12, dtype=np.float32).reshape(3, 4))
    assert array_node(big, "big").taken_in_place == 1  # offered its memory, which the restore filled


def test_a_parameter_added_after_the_restore_receives_its_value(tmp_path) -> None:
    path = tp.Checkpoint(model=layer_node(_model())).write(str(tmp_path / "c"))
    later = Layer(bias=np.ones(4, np.float32))
    later.layers["dense"] = Layer()
    status = tp.Checkpoint(model=layer_node(later)).read(path)
    assert later.layers["dense"].params == {}
    kernel = np.zeros((3, 4), np.float32)
    later.layers["dense"].add("kernel", kernel)  # the framework's own hook gives it its value
    np.testing.assert_array_equal(kernel, np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(tp.errors.InvalidArgumentError, match="big is float32"):
        later.layers["dense"].add("big", np.zeros(5, np.float32))  # refused: the value keeps waiting
    later.layers["dense"].add("big", np.ones(MiB, np.float32))
    assert (later.layers["dense"].params["big"] == 0).all()
    status.assert_consumed()


def test_a_bad_restore_changes_nothing(tmp_path) -> None:
    model = _model()
    path = tp.Checkpoint(model=layer_node(model)).write(str(tmp_path / "c"))
    other = Layer(bias=np.full(4, 7.0, np.float32))
    other.layers["dense"] = Layer(kernel=np.zeros((4, 3), np.float32), big=np.full(MiB, 7.0, np.float32))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"kernel is float32\(4, 3\)"):
        tp.Checkpoint(model=layer_node(other)).read(path)
    assert (other.params["bias"] == 7.0).all() and (other.layers["dense"].params["big"] == 7.0).all()


def test_an_async_save_writes_the_values_of_the_moment_it_returned(tmp_path) -> None:
    model = _model()
    ckpt = tp.Checkpoint(model=layer_node(model))
    path = ckpt.write(str(tmp_path / "c"), options=tp.CheckpointOptions(enable_async=True))
    model.params["bias"][...] = 5.0  # the array offered without a copy: the save copied it first
    ckpt.sync()
    np.testing.assert_array_equal(tp.load_variable(path, "model/bias/.ATTRIBUTES/VARIABLE_VALUE"), np.zeros(4))


def test_optimizer_state_is_slot_variables_restored_in_either_order(tmp_path) -> None:
    model = _model()
    kernel = model.layers["dense"].params["kernel"]
    optimizer = Momentum(0.5)
    optimizer.step([kernel])
    params = [array_node(kernel, "kernel")]
    path = tp.Checkpoint(model=layer_node(model), opt=MomentumNode(optimizer, params)).write(str(tmp_path / "c"))
    assert "model/dense/kernel/.OPTIMIZER_SLOT/opt/momentum/.ATTRIBUTES/VARIABLE_VALUE" in dict(tp.list_variables(path))

    fresh_model, fresh = _model(), Momentum(0.1)
    fresh_kernel = fresh_model.layers["dense"].params["kernel"]
    node = MomentumNode(fresh, [array_node(fresh_kernel, "kernel")])
    tp.Checkpoint(model=layer_node(fresh_model), opt=node).read(path).assert_consumed()
    assert fresh.lr == 0.5
    np.testing.assert_array_equal(fresh.momentum[id(fresh_kernel)], np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(fresh_kernel, kernel)


def test_the_adapter_imports_only_trackpoint_and_its_protocol() -> None:
    tree = ast.parse(Path(__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.update(
                f"{node.module}.{alias.name}" if node.module == "trackpoint" else node.module for alias in node.names
            )
    ours = {name for name in imported if name.split(".")[0] == "trackpoint"}
    assert ours <= {"trackpoint", "trackpoint.protocol"}, ours
    private = [
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr in {"_tp", "_tp_state", "_tp_update_uid"}
    ]
    assert not private  # the core's bookkeeping is reached through the protocol only
