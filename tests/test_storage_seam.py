"""The storage seam: where bytes live is ``trackpoint._storage``'s business alone.

Every other layer asks a :class:`~trackpoint._storage.storage.Storage` (picked by
``storage_for(path)``) and never checks a path for a URL itself; the storage package sits
under every other layer and imports none of them.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import trackpoint
from trackpoint._storage import storage
from trackpoint._storage.local_storage import LOCAL
from trackpoint._storage.object_storage import OBJECTS

PACKAGE = pathlib.Path(trackpoint.__file__).parent
STORAGE = PACKAGE / "_storage"

# What the storage package may import of trackpoint: itself and the exception tree.
STORAGE_MAY_IMPORT = ("trackpoint._storage", "trackpoint.errors")

# Modules outside the storage package that still check paths for URLs themselves, and why.
URL_CHECKS_ALLOWED = {
    "_format/state_file.py": "takes a stored URL as absolute (name syntax)",
    "_saving/rank_files.py": "withdraws uploaded data objects",
    "checkpoint.py": "skips save numbers in use at a URL",
    "cli/_arguments.py": "collects the URLs its storage options apply to",
    "manager.py": "merges the state object at a URL",
    "distributed/_save.py": "uploads data objects ahead of the index",
    "tools/_to_safetensors.py": "writes a converted directory to a URL",
    "tools/_hf_layout.py": "reads a Hugging Face layout at a URL",
    "torch/_dcp.py": "uploads data objects ahead of the index",
}


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """Every ``trackpoint`` module ``path`` imports, anywhere in it (in functions and under
    ``if TYPE_CHECKING:`` too: knowing a layer's types is knowing the layer)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):  # relative: inside the package it sits in
            found.append((node.lineno, f"trackpoint.{path.parent.name}.{node.module or ''}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "trackpoint"]


def _url_checks(path: pathlib.Path) -> list[str]:
    """Where ``path`` tells a URL from a local path itself: ``is_url`` or a ``"://"`` test."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Name)
            and node.id == "is_url"
            or isinstance(node, ast.Attribute)
            and node.attr == "is_url"
        ):
            found.append(f"line {node.lineno}: is_url")
        elif isinstance(node, ast.Constant) and node.value == "://":
            found.append(f"line {node.lineno}: '://'")
    return found


def _outside_storage() -> list[pathlib.Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if STORAGE not in p.parents and "_proto" not in p.parts]


def test_the_storage_package_imports_no_layer_above_it() -> None:
    offenders = {
        path.name: [f"line {line}: {name}" for line, name in imports if not name.startswith(STORAGE_MAY_IMPORT)]
        for path in sorted(STORAGE.glob("*.py"))
        if (imports := _imports(path))
    }
    assert {name: found for name, found in offenders.items() if found} == {}, (
        "the storage knows nothing of formats, trackables or graphs: pass what it needs in instead"
    )


def test_no_module_outside_the_storage_package_checks_for_urls_itself() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): uses
        for path in _outside_storage()
        if str(path.relative_to(PACKAGE)) not in URL_CHECKS_ALLOWED and (uses := _url_checks(path))
    }
    assert offenders == {}, "ask the storage (trackpoint._storage.storage.storage_for) instead"
    # The allowance is not stale: each allowed module does check.
    assert [name for name in URL_CHECKS_ALLOWED if not _url_checks(PACKAGE / name)] == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/tmp/run/ckpt-1", LOCAL),
        ("run/ckpt-1", LOCAL),
        ("file:///tmp/run/ckpt-1", LOCAL),
        ("s3://bucket/run/ckpt-1", OBJECTS),
        ("gs://bucket/ckpt-1", OBJECTS),
        ("memory://ckpt-1", OBJECTS),
    ],
)
def test_storage_for_picks_objects_for_urls_and_local_files_otherwise(path: str, expected: object) -> None:
    assert storage.storage_for(path) is expected


def test_both_storages_implement_every_method_of_the_protocol() -> None:
    wanted = {name for name in vars(storage.Storage) if not name.startswith("_")} | {"local_copies"}
    for implementation in (LOCAL, OBJECTS):
        missing = {name for name in wanted if not hasattr(implementation, name)}
        assert missing == set(), f"{type(implementation).__name__} lacks {missing}"


def test_the_two_storages_name_a_checkpoint_in_a_state_file_alike(tmp_path: pathlib.Path) -> None:
    # Inside the directory: the bare name; elsewhere: the whole path or URL.
    assert LOCAL.relative(str(tmp_path), str(tmp_path / "ckpt-1")) == "ckpt-1"
    assert OBJECTS.relative("s3://b/run", "s3://b/run/ckpt-1") == "ckpt-1"
    assert LOCAL.relative(str(tmp_path / "run"), str(tmp_path / "ckpt-1")) == str(tmp_path / "ckpt-1")
    assert OBJECTS.relative("s3://b/run", "s3://b/other/ckpt-1") == "s3://b/other/ckpt-1"
    assert LOCAL.relative(str(tmp_path), "s3://b/run/ckpt-1") == "s3://b/run/ckpt-1"
