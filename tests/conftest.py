"""Fixtures and hooks only; helpers that test modules import live in tests/helpers.py.

Markers (registered in pyproject.toml): ``interop`` for tests that run real TensorFlow, ``slow`` for the
crash, kill and fuzz tests and anything else that takes seconds. ``python -m pytest -m "not interop and not
slow"`` is the inner loop; plain ``python -m pytest`` (CI) runs everything.
"""

from __future__ import annotations

import gc
import pathlib
from collections.abc import Iterator

import pytest

from tests.helpers import ReuseLog, reuse_log

# The generator needs TensorFlow and writes files; --doctest-modules must not import it.
collect_ignore = ["golden/make_golden.py"]

TESTS = pathlib.Path(__file__).resolve().parent

# Every test under these directories (relative to tests/) runs real TensorFlow.
INTEROP_DIRS = ("interop",)
# Tests elsewhere that run TensorFlow (in a child process), by node id prefix relative to tests/. Their own
# module keeps them beside the trackpoint-only tests of the same feature.
INTEROP_TESTS = (
    "graph/test_big_endian_variables.py::test_tensorflow_reads_a_big_endian_variable_saved_by_trackpoint",
    "corrupt/test_overwrite_crash.py::test_sigkill_during_in_place_overwrites_never_leaves_the_prefix",
    "test_benchmarks.py::test_compare_quick_runs_every_contender",
)


def pytest_configure(config: pytest.Config) -> None:
    # A plugin, not fixtures here: a conftest's fixtures reach only the tests below it, and the doctests
    # are under src/.
    config.pluginmanager.import_plugin("tests.doctest_fixtures")


def _relative(item: pytest.Item) -> str | None:
    try:
        path = pathlib.Path(str(item.path)).resolve().relative_to(TESTS)
    except ValueError:  # a doctest under src/
        return None
    return path.as_posix() + item.nodeid.partition("::")[1] + item.nodeid.partition("::")[2]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the TensorFlow tests ``interop``, by directory or by name (see INTEROP_DIRS, INTEROP_TESTS)."""
    for item in items:
        relative = _relative(item)
        if relative is None:
            continue
        if relative.split("/", 1)[0] in INTEROP_DIRS or relative.startswith(INTEROP_TESTS):
            item.add_marker(pytest.mark.interop)


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off: what a test frees, reference counting alone must free."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def reuse() -> Iterator[ReuseLog]:
    """What the ``trackpoint.reuse`` logger says during the test (see ``helpers.ReuseLog``)."""
    with reuse_log() as log:
        yield log
