"""The graph layer reaches objects only through the extension protocol, and adapters only through it too.

Pinned by reading the source: no module of ``_graph`` knows ``tp.Variable`` (no import, no type
test); every ``_tp_`` hook the graph layer looks up on an object is declared by a protocol of
``trackpoint.protocol``; and ``trackpoint.torch`` neither writes nor reads the core's bookkeeping
nor spells the protocol's constants again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import trackpoint
from trackpoint import protocol

SRC = Path(trackpoint.__file__).parent

#: ``_tp_`` names the graph layer uses that are the core's own, not hooks: the bookkeeping that
#: ``tp.Trackable`` carries, and a check of the core's own container wrappers (ListWrapper, DictWrapper).
CORE_OWNED = {"_tp", "_tp_update_uid", "_tp_storage_unchanged"}


def _trees(package: str) -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text()) for path in sorted((SRC / package).glob("*.py"))}


def _declared_hooks() -> set[str]:
    names: set[str] = set()
    for name in protocol.__all__:
        obj = getattr(protocol, name)
        if isinstance(obj, type):
            names.update(n for n in dir(obj) if n.startswith("_tp_"))
            names.update(n for n in getattr(obj, "__annotations__", {}) if n.startswith("_tp_"))
    return names


def _tp_names(tree: ast.Module) -> set[str]:
    """``_tp_`` names read as attributes, or looked up by string (getattr/hasattr)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_tp"):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_tp_"):
            found.add(node.value)
    return found


def test_the_graph_layer_knows_no_concrete_variable_class() -> None:
    for name, tree in _trees("_graph").items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "trackpoint._tracking.variables", name
                assert node.module != "trackpoint._tracking.sharded", name
            if isinstance(node, ast.Name):
                assert node.id not in {"Variable", "ShardedVariable"}, f"{name}:{node.lineno}"


def test_every_hook_the_graph_layer_looks_up_is_in_the_protocol() -> None:
    declared = _declared_hooks()
    assert {"_tp_destinations", "_tp_check_value", "_tp_after_save", "_tp_copy_on_write"} <= declared
    for name, tree in _trees("_graph").items():
        unknown = _tp_names(tree) - declared - CORE_OWNED
        assert not unknown, f"_graph/{name} looks up {sorted(unknown)}, which trackpoint.protocol does not declare"


def test_the_torch_adapter_leaves_the_core_bookkeeping_alone() -> None:
    for name, tree in _trees("torch").items():
        touched = _tp_names(tree) & {"_tp", "_tp_state", "_tp_update_uid"}
        assert not touched, f"torch/{name} touches {sorted(touched)}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
                assert not targets & {"VARIABLE_VALUE", "PYTHON_STATE"}, f"torch/{name} redefines {targets}"
