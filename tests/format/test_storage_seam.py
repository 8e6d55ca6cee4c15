"""The storage seam: format code goes through ``storage_for(path)`` and never asks itself where bytes live."""

from __future__ import annotations

import ast
import pathlib

import pytest

import trackpoint
from trackpoint._format import storage
from trackpoint._format.local_storage import LOCAL
from trackpoint._format.object_storage import OBJECTS

FORMAT = pathlib.Path(trackpoint.__file__).parent / "_format"

# The modules that may know about URLs, and why.
ALLOWED = {
    "storage.py": "picks the storage by the path",
    "object_storage.py": "is the object-store storage",
    "object_bundles.py": "the object store's rules for what killed writers leave",
    "local_storage.py": "stores a URL named in a local state file whole (name syntax)",
    "state_file.py": "takes a stored URL as absolute (name syntax)",
}


def _storage_uses(path: pathlib.Path) -> list[str]:
    """What in ``path`` imports ``trackpoint._storage`` or calls ``is_url`` (imports for type
    annotations alone, under ``if TYPE_CHECKING:``, do not count)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trackpoint._storage"):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Name) and node.id == "is_url":
            found.append(f"line {node.lineno}: is_url")
    return found


def test_no_format_module_but_the_storages_branches_on_where_bytes_live() -> None:
    offenders = {
        path.name: uses
        for path in sorted(FORMAT.glob("*.py"))
        if path.name not in ALLOWED and (uses := _storage_uses(path))
    }
    assert offenders == {}, "go through trackpoint._format.storage.storage_for instead"
    # The allowance is not stale: each allowed module does use it.
    assert all(_storage_uses(FORMAT / name) for name in ALLOWED)


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
