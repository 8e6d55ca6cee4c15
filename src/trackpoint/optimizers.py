"""Optimizers with slot variables, laid out as TF1's ``tf.compat.v1.train`` optimizers checkpoint.

Slots (``add_slot``/``get_slot``/``get_slot_names``) are saved under
``<variable>/.OPTIMIZER_SLOT/<optimizer>/<slot>`` with a ``slot_variables`` reference on the
optimizer's node, and restored in either order: variable first, optimizer first, or a slot
created after ``restore()`` (it starts with its checkpoint value). ``SGD`` and ``Adam``
follow ``MomentumOptimizer``/``GradientDescentOptimizer`` and ``AdamOptimizer`` step for step
in the variable's dtype, so training can stop in TensorFlow and resume here, or the reverse.

Examples:
    >>> import numpy as np
    >>> import trackpoint as tp
    >>> w = tp.Variable([1.0, 2.0], name="w")
    >>> opt = tp.optimizers.Adam(learning_rate=0.1)
    >>> opt.apply_gradients([(np.array([0.5, -0.5], np.float32), w)])
    >>> opt.get_slot_names(), opt.get_slot(w, "m").shape
    (['m', 'v'], (2,))
    >>> w.numpy().round(4)
    array([0.9, 2.1], dtype=float32)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import (
    PendingRestore,
    create_from_pending,
    restore_pending,
    structure_changed,
    trust_slots,
)
from trackpoint._tracking.variables import Variable
from trackpoint.errors import InvalidArgumentError

__all__ = ["SGD", "Adam", "Optimizer"]

# TF names slot variables through a process-wide counter of scope names ("w/Adam",
# "w/Adam_1", then "w/Adam_2" for the next optimizer); the names are only the graph's
# full_name fields, but matching them keeps our object graphs byte-identical to TF's.
_name_counts: dict[str, itertools.count] = {}
_name_lock = threading.Lock()


def _unique_name(base: str) -> str:
    with _name_lock:
        n = next(_name_counts.setdefault(base, itertools.count()))
    return base if n == 0 else f"{base}_{n}"


class Optimizer(Trackable):
    """Base class: slot bookkeeping and checkpoint hooks; subclasses implement ``_apply_dense``.

    Args:
        name: Used in slot variable names (``"<var>/<name>"``), as TF does.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._slots: dict[str, dict[int, tuple[Variable, Variable]]] = {}
        self._deferred_slots: dict[tuple[str, int], list[PendingRestore]] = {}

    # -- slots --------------------------------------------------------------------------

    def get_slot_names(self) -> list[str]:
        """Names of the slots created so far, sorted."""
        return sorted(self._slots)

    def get_slot(self, var: Any, name: str) -> Variable | None:
        """The slot ``name`` of ``var``, or None."""
        entry = self._slots.get(name, {}).get(id(var))
        return entry[1] if entry is not None and entry[0] is var else None

    def _make_slot(self, var: Variable, slot_name: str, value: Any) -> Variable:
        slot = Variable(value, dtype=var.dtype, name=_unique_name(f"{var.name}/{self._name}"), trainable=False)
        if slot.shape != var.shape:
            raise InvalidArgumentError(
                f"slot {slot_name!r} of variable {var.name!r} would have shape {slot.shape}, not the variable's "
                f"{var.shape}"
            )
        self._slots.setdefault(slot_name, {})[id(var)] = (var, slot)
        structure_changed(self)
        return slot

    def add_slot(self, var: Variable, slot_name: str, initial_value: Any = None) -> Variable:
        """Create (or return the existing) slot ``slot_name`` for ``var``.

        A slot whose value is waiting in a restored checkpoint starts with that value.
        Otherwise it starts with ``initial_value`` (zeros by default).
        """
        existing = self.get_slot(var, slot_name)
        if existing is not None:
            return existing
        pending = self._deferred_slots.pop((slot_name, id(var)), [])
        default = np.zeros(var.shape, var.dtype) if initial_value is None else initial_value
        slot = create_from_pending(pending, lambda value: self._make_slot(var, slot_name, value), default)
        restore_pending(pending, slot)
        return slot

    #: TF1's slot names, as ``tf.compat.v1.train`` optimizers call their slot variables in a
    #: fresh graph: slot -> the suffix after ``<var>/<name>`` (Adam's second slot is ``_1``).
    _tf1_slot_suffixes: ClassVar[Mapping[str, str]] = MappingProxyType({})

    def _tp_slot_global_name(self, variable: Any, slot_name: str) -> str | None:
        """The name TF1 saved ``variable``'s slot under (``w/Adam_1``), for a name-based restore
        (``protocol.GlobalSlotNames``): fixed, unlike the slot variable's own name, which counts
        the optimizers made in this process."""
        suffix = self._tf1_slot_suffixes.get(slot_name)
        name = getattr(variable, "name", None)
        return None if suffix is None or not isinstance(name, str) else f"{name}/{self._name}{suffix}"

    def _create_or_restore_slot_variable(
        self, position: PendingRestore, variable: Trackable, slot_name: str
    ) -> Variable | None:
        """Checkpoint hook: the slot to bind for ``(variable, slot_name)``, created now if possible."""
        slot = self.get_slot(variable, slot_name)
        if slot is None and position.is_simple_variable() and isinstance(variable, Variable):
            slot = self._make_slot(variable, slot_name, position.simple_variable_value())
            return slot  # bound and assigned by the caller
        if slot is None:
            self._deferred_slots.setdefault((slot_name, id(variable)), []).append(position)
        return slot

    def variables(self) -> list[Variable]:
        """Non-slot variables and every slot, sorted by name as TF lists them."""
        found = [v for v in self._trackable_children().values() if isinstance(v, Variable)]
        found += [slot for slots in self._slots.values() for _, slot in slots.values()]
        return sorted(found, key=lambda v: v.name)

    # -- training -----------------------------------------------------------------------

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> None:
        """Apply one step; pairs whose gradient is None are skipped."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        for grad, var in pairs:
            if not isinstance(var, Variable):
                raise InvalidArgumentError(f"apply_gradients expects tp.Variable objects, got {type(var).__name__}")
            if np.shape(grad) != var.shape:
                raise InvalidArgumentError(
                    f"gradient of shape {np.shape(grad)} for variable {var.name!r} of shape {var.shape}"
                )
        self._create_slots([v for _, v in pairs])
        for grad, var in pairs:
            self._apply_dense(np.asarray(grad, dtype=var.dtype), var)
        self._finish()

    def _create_slots(self, var_list: list[Variable]) -> None:
        del var_list

    def _apply_dense(self, grad: np.ndarray, var: Variable) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        pass


class SGD(Optimizer):
    """Gradient descent, with an optional ``momentum`` slot (TF's ``MomentumOptimizer``).

    Without momentum: ``var -= lr * grad``. With momentum:
    ``accum = accum * momentum + grad``; ``var -= accum * lr`` (Nesterov:
    ``var -= grad * lr + accum * momentum * lr``).

    Examples:
        >>> import numpy as np
        >>> import trackpoint as tp
        >>> w = tp.Variable([1.0])
        >>> opt = tp.optimizers.SGD(0.5, momentum=0.9)
        >>> opt.apply_gradients([(np.array([1.0], np.float32), w)])
        >>> w.numpy(), opt.get_slot(w, "momentum").numpy()
        (array([0.5], dtype=float32), array([1.], dtype=float32))
    """

    def __init__(
        self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False, name: str | None = None
    ) -> None:
        if momentum < 0:
            raise InvalidArgumentError(f"momentum must be >= 0, got {momentum}")
        super().__init__(name or ("Momentum" if momentum else "GradientDescent"))
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.nesterov = nesterov

    _tf1_slot_suffixes = MappingProxyType({"momentum": ""})

    def _create_slots(self, var_list: list[Variable]) -> None:
        if self.momentum:
            for var in var_list:
                self.add_slot(var, "momentum")

    def _apply_dense(self, grad: np.ndarray, var: Variable) -> None:
        lr = var.dtype.type(self.learning_rate)
        if not self.momentum:
            var.assign(var.read_value() - grad * lr)
            return
        momentum = var.dtype.type(self.momentum)
        slot = self.get_slot(var, "momentum")
        assert slot is not None  # created by _create_slots
        accum = slot.read_value() * momentum + grad
        slot.assign(accum)
        if self.nesterov:
            var.assign(var.read_value() - (grad * lr + accum * momentum * lr))
        else:
            var.assign(var.read_value() - accum * lr)


class Adam(Optimizer):
    """Adam as ``tf.compat.v1.train.AdamOptimizer`` computes and checkpoints it.

    Slots ``m`` and ``v``; ``beta1_power`` and ``beta2_power`` are float32 children of the
    optimizer. Per step: ``alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)``,
    ``m += (g - m) * (1 - beta1)``, ``v += (g*g - v) * (1 - beta2)``,
    ``var -= m * alpha / (sqrt(v) + epsilon)``; then both powers are multiplied by their beta.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        name: str = "Adam",
    ) -> None:
        super().__init__(name)
        self.learning_rate = learning_rate
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon

    _tf1_slot_suffixes = MappingProxyType({"m": "", "v": "_1"})

    def _power(self, name: str, initial: float) -> Variable:
        existing = self._lookup_dependency(name)
        if isinstance(existing, Variable):
            return existing
        return self._add_variable(
            name, lambda value: Variable(value, dtype=np.float32, name=name, trainable=False), np.float32(initial)
        )

    def _create_slots(self, var_list: list[Variable]) -> None:
        self._power("beta1_power", self.beta1)
        self._power("beta2_power", self.beta2)
        for var in var_list:
            self.add_slot(var, "m")
            self.add_slot(var, "v")

    def _apply_dense(self, grad: np.ndarray, var: Variable) -> None:
        t = var.dtype.type
        one = t(1)
        beta1_power = t(self._power("beta1_power", self.beta1).numpy())
        beta2_power = t(self._power("beta2_power", self.beta2).numpy())
        beta1, beta2 = t(self.beta1), t(self.beta2)
        alpha = t(self.learning_rate) * np.sqrt(one - beta2_power) / (one - beta1_power)
        m_slot, v_slot = self.get_slot(var, "m"), self.get_slot(var, "v")
        assert m_slot is not None and v_slot is not None  # created by _create_slots
        m = m_slot.read_value()
        m = m + (grad - m) * (one - beta1)
        v = v_slot.read_value()
        v = v + (grad * grad - v) * (one - beta2)
        m_slot.assign(m)
        v_slot.assign(v)
        var.assign(var.read_value() - (m * alpha) / (np.sqrt(v) + t(self.epsilon)))

    def _finish(self) -> None:
        for name, beta in (("beta1_power", self.beta1), ("beta2_power", self.beta2)):
            power = self._power(name, beta)
            power.assign(power.read_value() * np.float32(beta))


# Every slot creation goes through _make_slot, which reports it: saves may reuse their
# layout and restores their bindings (see _tracking.epoch).
trust_slots(Optimizer)
