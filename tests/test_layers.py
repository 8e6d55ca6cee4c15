"""The edges stand on facades: tools, adapters and the CLI reach the core only through the public API,
the extension protocol and two internal facades, and ``import trackpoint`` loads none of them.

The rules (``DESIGN.md``, "Facades for the edges"), read from the source with ``ast``:

- a module of an edge package imports only public trackpoint modules (no path component with a
  leading underscore), the facades :mod:`trackpoint._io` and :mod:`trackpoint._pipeline`, and its
  own package's modules; so no edge imports another edge's private modules;
- the core (everything outside the edges) imports no edge;
- the facades define nothing of their own: imports, ``__all__`` and a docstring;
- the helper modules of ``tools`` and the modules of ``cli`` have a leading underscore;
- ``import trackpoint`` loads no edge module (the tools are imported on first use).

An allowance below lists a violation still being removed; an entry that no longer violates fails,
so the list only shrinks.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import trackpoint

PACKAGE = pathlib.Path(trackpoint.__file__).parent

# Every edge: one framework, one job or one command group each. Future adapters are listed already.
EDGES = ("cli", "compat", "distributed", "jax", "keras", "tools", "torch")
FACADES = ("trackpoint._io", "trackpoint._pipeline")
# The tools' public entry points; every other module of ``tools`` is an internal helper.
TOOL_ENTRY_POINTS = {"__init__.py", "average.py", "convert.py", "merge.py", "report.py", "rewrite.py"}

# Edge modules that still import a core private, by module (path under the package) -> the imports.
# Empty: the torch adapter reaches the graph through ``trackpoint.protocol`` alone; this must stay empty.
EDGE_ALLOWANCE: dict[str, set[str]] = {}

# Core modules that still import an edge, by module -> the imports. Must stay empty.
CORE_ALLOWANCE: dict[str, set[str]] = {}
# What ``import trackpoint`` loads of the edges because of CORE_ALLOWANCE; must stay empty with it.
LOADED_ALLOWANCE: set[str] = set()


def _module_name(path: pathlib.Path) -> str:
    parts = ["trackpoint", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _edge_of(path: pathlib.Path) -> str | None:
    """The edge package ``path`` belongs to (``__main__.py`` is the command line's), or None for the core."""
    first = path.relative_to(PACKAGE).parts[0]
    if first == "__main__.py":
        return "cli"
    return first if first in EDGES else None


def _imports(path: pathlib.Path) -> list[str]:
    """Every trackpoint module or name ``path`` imports, as a dotted path (``from a import b`` gives
    ``a.b``: ``b`` may be a module or a name, and either is private if it starts with ``_``).
    Imports inside functions and under ``if TYPE_CHECKING:`` count: they couple all the same."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing package
                parent = package.split(".")
                base = ".".join(parent[: len(parent) - node.level + 1] + ([base] if base else []))
            found += [f"{base}.{alias.name}" if alias.name != "*" else base for alias in node.names]
    return sorted({name for name in found if name == "trackpoint" or name.startswith("trackpoint.")})


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split(".")[1:])


def _edge_violations(path: pathlib.Path) -> set[str]:
    own = f"trackpoint.{_edge_of(path)}"
    return {
        name
        for name in _imports(path)
        if _is_private(name)
        and not any(name == facade or name.startswith(facade + ".") for facade in FACADES)
        and not (name == own or name.startswith(own + "."))
    }


def _core_violations(path: pathlib.Path) -> set[str]:
    edges = tuple(f"trackpoint.{edge}" for edge in EDGES)
    return {name for name in _imports(path) if any(name == e or name.startswith(e + ".") for e in edges)}


def _sources() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts)


def _relative(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_edges_import_only_the_public_api_the_facades_and_their_own_modules() -> None:
    found = {_relative(p): v for p in _sources() if _edge_of(p) and (v := _edge_violations(p))}
    unexpected = {path: names - EDGE_ALLOWANCE.get(path, set()) for path, names in found.items()}
    assert {path: names for path, names in unexpected.items() if names} == {}, (
        "an edge reaches the core through trackpoint._io or trackpoint._pipeline (add the name there), "
        "or through the public API and trackpoint.protocol"
    )
    stale = {path: names - found.get(path, set()) for path, names in EDGE_ALLOWANCE.items()}
    assert {path: names for path, names in stale.items() if names} == {}, "remove these from EDGE_ALLOWANCE"


def test_the_core_imports_no_edge() -> None:
    # The package's __init__ names the tools for type checkers only, under TYPE_CHECKING, and imports
    # them on first use through importlib: it is the one core module allowed to name them.
    found = {
        _relative(p): v
        for p in _sources()
        if not _edge_of(p) and p != PACKAGE / "__init__.py" and (v := _core_violations(p))
    }
    unexpected = {path: names - CORE_ALLOWANCE.get(path, set()) for path, names in found.items()}
    assert {path: names for path, names in unexpected.items() if names} == {}
    stale = {path: names - found.get(path, set()) for path, names in CORE_ALLOWANCE.items()}
    assert {path: names for path, names in stale.items() if names} == {}, "remove these from CORE_ALLOWANCE"


def test_the_package_init_names_the_tools_only_for_type_checkers() -> None:
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    at_import = [
        node
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom)) and (node.module or "").startswith("trackpoint.tools")
    ]
    assert at_import == []


@pytest.mark.parametrize("facade", FACADES)
def test_a_facade_defines_nothing_and_lists_what_it_imports(facade: str) -> None:
    path = PACKAGE / (facade.split(".")[-1] + ".py")
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
            assert (node.module or "").startswith("trackpoint."), f"{facade} re-exports trackpoint only"
            imported |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            listed = set(ast.literal_eval(node.value))
        else:
            assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant), (
                f"{facade} line {node.lineno}: a facade only re-exports"
            )
    assert listed == imported


def test_tool_helpers_and_command_modules_are_private() -> None:
    tools = {p.name for p in (PACKAGE / "tools").glob("*.py")} - TOOL_ENTRY_POINTS
    assert sorted(name for name in tools if not name.startswith("_")) == []
    commands = {p.name for p in (PACKAGE / "cli").glob("*.py")} - {"__init__.py"}
    assert sorted(name for name in commands if not name.startswith("_")) == []


def test_no_edge_spells_out_the_object_graph_key() -> None:
    offenders = [
        _relative(p)
        for p in _sources()
        if _edge_of(p)
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Constant) and node.value == "_CHECKPOINTABLE_OBJECT_GRAPH"
    ]
    assert offenders == [], "use OBJECT_GRAPH_KEY from trackpoint._io"


def test_import_trackpoint_loads_no_edge() -> None:
    edges = ", ".join(repr(f"trackpoint.{edge}") for edge in EDGES)
    code = (
        "import sys, trackpoint\n"
        f"edges = ({edges},)\n"
        "print(sorted(m for m in sys.modules if m in edges or m.startswith(tuple(e + '.' for e in edges))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(result.stdout.strip()))
    assert loaded - LOADED_ALLOWANCE == set()
    assert LOADED_ALLOWANCE - loaded == set(), "remove these from LOADED_ALLOWANCE"


def test_a_tool_is_imported_on_first_use_and_reports_the_package() -> None:
    code = (
        "import sys, trackpoint as tp\n"
        "assert 'trackpoint.tools.convert' not in sys.modules\n"
        "assert 'convert' in dir(tp) and 'convert' in tp.__all__\n"
        "f = tp.convert\n"
        "assert 'trackpoint.tools.convert' in sys.modules and f.__module__ == 'trackpoint'\n"
        "from trackpoint.tools.convert import convert\n"
        "assert convert is f\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr
