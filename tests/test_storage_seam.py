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

# The one module that may touch private attributes of fsspec's backends (``fs._call_s3``...).
PROVIDERS = STORAGE / "providers.py"


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
    offenders = {str(path.relative_to(PACKAGE)): uses for path in _outside_storage() if (uses := _url_checks(path))}
    assert offenders == {}, "ask the storage (trackpoint._storage.storage.storage_for(path)) instead"


def _backend_privates(path: pathlib.Path) -> list[str]:
    """Where ``path`` reads a private attribute of an fsspec filesystem (a name ``fs`` by this
    package's habit, or ``*.fs``): ``fs._call_s3``, ``self.fs._location``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "fs" or isinstance(owner, ast.Attribute) and owner.attr == "fs":
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_private_attributes_of_fsspec_backends_are_touched_in_the_providers_module_only() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PROVIDERS and (uses := _backend_privates(path))
    }
    assert offenders == {}, "a backend's internals change between releases: keep every use in providers.py"
    assert _backend_privates(PROVIDERS), "the scan still sees the uses it allows"


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
    wanted = {name for name in vars(storage.Storage) if not name.startswith("_")} | set(storage.Storage.__annotations__)
    assert {"local_copies", "data_put_ahead", "merges_state", "has_directories", "directly_in"} <= wanted
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


def test_what_callers_ask_instead_of_checking_for_a_url(tmp_path: pathlib.Path) -> None:
    # The answers the manager, Checkpoint.save, the tools and the multi-process save branch on.
    assert (LOCAL.merges_state, LOCAL.data_put_ahead, LOCAL.has_directories) == (False, False, True)
    assert (OBJECTS.merges_state, OBJECTS.data_put_ahead, OBJECTS.has_directories) == (True, True, False)
    assert (
        LOCAL.directory(str(tmp_path) + "/") == str(tmp_path) + "/" and OBJECTS.directory("s3://b/run/") == "s3://b/run"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "sub")
    assert LOCAL.directly_in(str(tmp_path / "sub"), str(tmp_path / "link" / "ckpt-1"))  # by real paths
    assert not LOCAL.directly_in(str(tmp_path), str(tmp_path / "sub" / "ckpt-1"))
    assert not LOCAL.directly_in(str(tmp_path), "s3://b/run/ckpt-1")
    assert OBJECTS.directly_in("s3://b/run", "s3://b/run/ckpt-1")
    assert not OBJECTS.directly_in("s3://b/run", "s3://b/run/sub/ckpt-1")
    for implementation, directory in ((LOCAL, str(tmp_path)), (OBJECTS, "s3://b/run")):
        assert implementation.absolute(directory, "ckpt-1") == f"{directory}/ckpt-1"
        assert implementation.absolute(directory, "/abs/ckpt-1") == "/abs/ckpt-1"
        assert implementation.absolute(directory, "gs://c/ckpt-1") == "gs://c/ckpt-1"
    # Locally no save number is ever taken, and nothing is put ahead of the index or left orphaned.
    assert LOCAL.prefixes_in_use(str(tmp_path)) == set()
    assert LOCAL.remove_orphans(str(tmp_path)) == []
    assert LOCAL.put_data([(str(tmp_path / "t"), str(tmp_path / "f"))], str(tmp_path / "ckpt-1")) == []
