"""The same container scripts, run on TensorFlow or on trackpoint, reduced to comparable outcomes.

Each scenario builds objects with one library's ``Variable``/``Module``/``Checkpoint`` and
mutates lists, dicts and tuples the way users do. :func:`outcome` then saves the checkpoint
and reports the keys it holds, or the builtin class of the exception and the TF phrases in
its message. ``tests/interop/test_tf_containers.py`` asserts that both libraries give the
same outcome for every scenario.

    python container_rules.py tf|tp      # print every outcome, one per line
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

Pair = collections.namedtuple("Pair", ["first", "second"])

#: Phrases of TF's container errors that tests written for TF search for.
PHRASES = (
    "A list element was replaced",
    "__setitem__",
    "__setslice__",
    "__delitem__",
    "__delslice__",
    "sort",
    "modified outside the wrapper",
    "The wrapped dictionary was modified outside the wrapper",
    "non-string key",
    "not constructable from its _fields",
)


class Lib:
    """The names a scenario uses, from TF or from trackpoint."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "tf":
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            import tensorflow as tf

            self.Variable, self.Module, self.Checkpoint = tf.Variable, tf.Module, tf.train.Checkpoint
            self.NoDependency = _tf_no_dependency()
            self.list_variables = tf.train.list_variables
        else:
            import trackpoint as tp

            self.Variable, self.Module, self.Checkpoint = tp.Variable, tp.Module, tp.Checkpoint
            self.NoDependency = tp.NoDependency
            self.list_variables = tp.list_variables

    def v(self, x: float) -> Any:
        return self.Variable(np.float32(x))


def _tf_no_dependency() -> type:
    from tensorflow.python.trackable.data_structures import NoDependency

    return NoDependency


Scenario = Callable[[Lib], Any]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def _module(lib: Lib, **attrs: Any) -> Any:
    m = lib.Module()
    for name, value in attrs.items():
        setattr(m, name, value)
    return m


# -- lists --------------------------------------------------------------------------------


@scenario
def list_appended_outside(lib: Lib) -> Any:
    vs: list = []
    m = _module(lib, vs=vs)
    vs.append(lib.v(1))
    return m


@scenario
def list_appended_through_wrapper(lib: Lib) -> Any:
    vs: list = []
    m = _module(lib, vs=vs)
    m.vs.append(lib.v(1))
    m.vs.append(5)
    return m


@scenario
def list_plain_appended_outside(lib: Lib) -> Any:
    vs: list = [lib.v(1)]
    m = _module(lib, vs=vs)
    vs.append(3)
    return m


@scenario
def list_only_plain_appended_outside(lib: Lib) -> Any:
    vs: list = [1]
    m = _module(lib, vs=vs, w=lib.v(2))
    vs.append(3)
    return m


@scenario
def list_replaced_trackable(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1)])
    m.l[0] = lib.v(2)
    return m


@scenario
def list_replaced_with_itself(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1)])
    m.l[0] = m.l[0]
    return m


@scenario
def list_plain_replaced_by_trackable(lib: Lib) -> Any:
    m = _module(lib, l=[1, 2])
    m.l[0] = lib.v(3)
    m.l[-1] = lib.v(4)
    return m


@scenario
def list_del_plain_beside_trackable(lib: Lib) -> Any:
    m = _module(lib, l=[1, lib.v(2)])
    del m.l[0]
    return m


@scenario
def list_del_in_plain_list(lib: Lib) -> Any:
    m = _module(lib, l=[1, 2, 3], w=lib.v(1))
    del m.l[0]
    m.l.pop()
    m.l.remove(2)
    m.l.insert(0, 9)
    m.l.sort()
    m.l.reverse()
    m.l[0:1] = [7, 8]
    m.l.clear()
    m.l.append(lib.v(5))
    return m


@scenario
def list_del_slice(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1), 2, 3])
    del m.l[1:2]
    return m


@scenario
def list_pop(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1), 2])
    m.l.pop()
    return m


@scenario
def list_remove(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1), 2])
    m.l.remove(2)
    return m


@scenario
def list_insert(lib: Lib) -> Any:
    m = _module(lib, l=[1])
    m.l.insert(0, lib.v(2))
    return m


@scenario
def list_sort(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1)])
    m.l.sort()
    return m


@scenario
def list_reverse(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1), 2])
    m.l.reverse()
    return m


@scenario
def list_reverse_keeps_middle(lib: Lib) -> Any:
    m = _module(lib, l=[1, lib.v(2), 3])
    m.l.reverse()
    return m


@scenario
def list_slice_assigned(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1), 2])
    m.l[1:] = [3, 4]
    return m


@scenario
def list_slice_assigned_in_plain_list(lib: Lib) -> Any:
    m = _module(lib, l=[1, 2])
    m.l[1:] = [lib.v(3), 4, lib.v(5)]
    return m


@scenario
def list_clear(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1)])
    m.l.clear()
    return m


@scenario
def list_imul(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1), 2])
    m.l *= 2
    return m


@scenario
def list_imul_zero(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1)])
    m.l *= 0
    return m


@scenario
def list_iadd_and_extend(lib: Lib) -> Any:
    m = _module(lib, l=[lib.v(1)])
    m.l += [lib.v(2)]
    m.l.extend([3, lib.v(4)])
    return m


@scenario
def list_nested_inner_edited_outside(lib: Lib) -> Any:
    inner: list = []
    m = _module(lib, l=[inner])
    inner.append(lib.v(1))
    return m


@scenario
def list_nested_inner_edited_through_wrapper(lib: Lib) -> Any:
    outer: list = [[]]
    m = _module(lib, l=outer)
    outer[0].append(lib.v(1))  # the outer list now holds the inner wrapper
    m.l[0].append(lib.v(2))
    return m


@scenario
def list_edited_outside_then_through_wrapper(lib: Lib) -> Any:
    vs: list = [lib.v(1)]
    m = _module(lib, vs=vs)
    vs.append(lib.v(2))
    m.vs.append(lib.v(3))
    return m


@scenario
def list_no_dependency_element(lib: Lib) -> Any:
    m = _module(lib, l=[lib.NoDependency(lib.v(1)), lib.v(2)])
    return m


# -- dicts --------------------------------------------------------------------------------


@scenario
def dict_set_outside(lib: Lib) -> Any:
    d: dict = {}
    m = _module(lib, d=d)
    d["k"] = lib.v(2)
    return m


@scenario
def dict_plain_set_outside(lib: Lib) -> Any:
    d: dict = {"a": lib.v(1), "x": 1}
    m = _module(lib, d=d)
    d["x"] = 2
    return m


@scenario
def dict_only_plain_set_outside(lib: Lib) -> Any:
    d: dict = {"x": 1}
    m = _module(lib, d=d, w=lib.v(1))
    d["y"] = 2
    return m


@scenario
def dict_deleted_outside(lib: Lib) -> Any:
    d: dict = {"a": lib.v(1), "b": lib.v(2)}
    m = _module(lib, d=d)
    del d["a"]
    return m


@scenario
def dict_set_through_wrapper(lib: Lib) -> Any:
    d: dict = {}
    m = _module(lib, d=d)
    m.d["k"] = lib.v(2)
    m.d["x"] = 3
    return m


@scenario
def dict_overwrite_trackable(lib: Lib) -> Any:
    m = _module(lib, d={"a": lib.v(1)})
    m.d["a"] = lib.v(2)
    return m


@scenario
def dict_delete_through_wrapper(lib: Lib) -> Any:
    m = _module(lib, d={"a": lib.v(1), "b": lib.v(2)})
    del m.d["a"]
    return m


@scenario
def dict_pop_through_wrapper(lib: Lib) -> Any:
    m = _module(lib, d={"a": lib.v(1), "b": lib.v(2)})
    m.d.pop("a")
    return m


@scenario
def dict_popitem_clear_through_wrapper(lib: Lib) -> Any:
    m = _module(lib, d={"a": lib.v(1), "b": lib.v(2)}, w=lib.v(3))
    m.d.popitem()
    m.d.clear()
    return m


@scenario
def dict_update_setdefault_through_wrapper(lib: Lib) -> Any:
    m = _module(lib, d={"a": lib.v(1)})
    m.d.update({"b": lib.v(2)}, c=lib.v(3))
    m.d.setdefault("e", lib.v(4))
    m.d.setdefault("a", lib.v(5))
    return m


@scenario
def dict_non_string_key_trackable(lib: Lib) -> Any:
    return _module(lib, d={1: lib.v(1)})


@scenario
def dict_non_string_key_plain(lib: Lib) -> Any:
    return _module(lib, d={1: 2, "a": lib.v(1)})


@scenario
def dict_non_string_key_set_through_wrapper(lib: Lib) -> Any:
    m = _module(lib, d={"a": lib.v(1)})
    m.d[(1, 2)] = lib.v(2)
    return m


@scenario
def dict_non_string_key_no_dependency(lib: Lib) -> Any:
    m = _module(lib, d={"a": lib.v(1)})
    m.d[3] = lib.NoDependency(lib.v(2))
    return m


@scenario
def dict_nested_list_through_wrapper(lib: Lib) -> Any:
    m = _module(lib, d={"a": []})
    m.d["a"].append(lib.v(1))
    return m


@scenario
def ordered_dict(lib: Lib) -> Any:
    return _module(lib, d=collections.OrderedDict([("b", lib.v(1)), ("a", lib.v(2))]))


# -- tuples -------------------------------------------------------------------------------


@scenario
def tuple_operations(lib: Lib) -> Any:
    m = _module(lib, t=(lib.v(1), 2))
    m.t2 = m.t + (lib.v(3),)
    m.t3 = m.t * 2
    m.t4 = 2 * m.t
    t = m.t
    t += (lib.v(4),)
    m.t5 = t
    return m


@scenario
def namedtuple_fields(lib: Lib) -> Any:
    return _module(lib, p=Pair(lib.v(1), lib.v(2)))


class _OwnNew(collections.namedtuple("_OwnNew", ["x", "y"])):
    def __new__(cls, x: Any) -> Any:
        return super().__new__(cls, x, x)


@scenario
def namedtuple_own_new(lib: Lib) -> Any:
    return _module(lib, p=_OwnNew(lib.v(1)))


@scenario
def tuple_nested_list(lib: Lib) -> Any:
    m = _module(lib, t=([],))
    m.t[0].append(lib.v(1))
    return m


def outcome(lib: Lib, name: str) -> tuple:
    """``("keys", sorted keys)`` after a save, or ``("error", phase, builtin class, phrases)``."""
    try:
        root = SCENARIOS[name](lib)
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return ("error", "build", _builtin(exc), _phrases(exc))
    ckpt = lib.Checkpoint(root=root)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = ckpt.write(os.path.join(tmp, "ckpt"))
        except Exception as exc:  # noqa: BLE001
            return ("error", "save", _builtin(exc), _phrases(exc))
        keys = sorted(k for k, _ in lib.list_variables(path) if k != "_CHECKPOINTABLE_OBJECT_GRAPH")
    return ("keys", tuple(keys))


def _builtin(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        if cls.__module__ == "builtins":
            return cls.__name__
    return "?"


def _phrases(exc: BaseException) -> tuple[str, ...]:
    return tuple(p for p in PHRASES if p in str(exc))


if __name__ == "__main__":
    chosen = Lib(sys.argv[1])
    for scenario_name in SCENARIOS:
        print(scenario_name, outcome(chosen, scenario_name))
