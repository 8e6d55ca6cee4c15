"""No import cycle among the package's modules at module level.

A cycle that imports cleanly today (because the edges that close it import module objects used
at call time) breaks as soon as one of its modules imports a name instead, and it hides which
layer sits on which. Imports inside functions and under ``if TYPE_CHECKING:`` do not run at
import time and are not counted; everything else at module level (in classes, ``try`` and
``if`` blocks too) is.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterable

import trackpoint

ROOT = pathlib.Path(trackpoint.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in ROOT.rglob("*.py") if "_proto" not in path.parts}


def _imported(statements: Iterable[ast.stmt], package: str) -> set[str]:
    """The ``trackpoint`` modules that ``statements`` import when they run (not in functions);
    ``package`` is the package relative imports start from."""
    found: set[str] = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found |= _imported(node.orelse, package)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:  # a submodule, or a name defined in the module itself
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        for block in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, block, None)
            if isinstance(inner, list):
                found |= _imported(inner, package)
    return found


def module_imports(name: str) -> set[str]:
    """The package's modules that importing the module ``name`` imports directly.

    Example:
        >>> "trackpoint.errors" in module_imports("trackpoint._format.varint")
        True
    """
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return {m for m in _imported(ast.parse(path.read_text()).body, package) if m in MODULES and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative).

    Example:
        >>> cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
        [['a', 'b', 'c']]
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_level_import_cycle_in_the_package() -> None:
    graph = {name: module_imports(name) for name in MODULES}
    assert cycles(graph) == [], "a module-level import cycle: move the shared code down, or import at call time"


def test_the_scan_sees_module_level_imports_and_skips_the_rest() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from trackpoint import errors\n"
        "if TYPE_CHECKING:\n    from trackpoint._format import crc\n"
        "try:\n    from trackpoint._format import varint\nexcept ImportError:\n    pass\n"
        "def later():\n    from trackpoint._format import sstable\n"
    )
    found = _imported(ast.parse(source).body, "trackpoint._saving")
    assert {m for m in found if m in MODULES} == {"trackpoint.errors", "trackpoint._format.varint"}


def test_a_cycle_through_three_modules_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]
