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
from _pytest.mark.expression import Expression

from tests.helpers import ReuseLog, reuse_log

# The generator needs TensorFlow and writes files; --doctest-modules must not import it.
collect_ignore = ["golden/make_golden.py"]

TESTS = pathlib.Path(__file__).resolve().parent

# Every test under these directories (relative to tests/) runs real TensorFlow.
INTEROP_DIRS = ("interop",)
# Tests elsewhere that run TensorFlow, by node id prefix relative to tests/, where their module cannot carry
# the marker itself (other tests carry ``@pytest.mark.interop``).
INTEROP_TESTS = ("corrupt/test_overwrite_crash.py::test_sigkill_during_in_place_overwrites_never_leaves_the_prefix",)

# Slow tests in modules that cannot carry the marker themselves (the others carry ``@pytest.mark.slow``
# or a module ``pytestmark``): each takes seconds.
SLOW_TESTS = (
    "corrupt/test_api_walk.py::test_every_reading_path_on_every_bad_file_raises_only_trackpoint_errors",
    "corrupt/test_corpus.py::test_corpus_case[graph_deep_chain]",
    "corrupt/test_corpus.py::test_every_path_fails_cleanly[graph_deep_chain]",
    "format/test_bundle.py::test_round_trip_random_tensors",
)


def pytest_configure(config: pytest.Config) -> None:
    # A plugin, not fixtures here: a conftest's fixtures reach only the tests below it, and the doctests
    # are under src/.
    config.pluginmanager.import_plugin("tests.doctest_fixtures")
    # No test process holds TensorFlow (with torch's triton it segfaults): it runs in a child of its own.
    config.pluginmanager.import_plugin("tests.interop.tf_guard")


def pytest_ignore_collect(collection_path: pathlib.Path, config: pytest.Config) -> bool | None:
    """Leave tests/interop uncollected when ``-m`` deselects its tests anyway: collecting it imports
    TensorFlow, which alone takes longer than a third of the inner loop."""
    if collection_path.name not in INTEROP_DIRS or collection_path.parent != TESTS:
        return None
    expression = config.getoption("markexpr")
    if not expression:
        return None
    matches = Expression.compile(expression).evaluate
    if any(matches(lambda name, have=have: name in have) for have in ({"interop"}, {"interop", "slow"})):
        return None
    return True


def _relative(item: pytest.Item) -> str | None:
    try:
        path = pathlib.Path(str(item.path)).resolve().relative_to(TESTS)
    except ValueError:  # a doctest under src/
        return None
    return path.as_posix() + item.nodeid.partition("::")[1] + item.nodeid.partition("::")[2]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the TensorFlow tests ``interop`` (by directory or by name) and the slow ones named in SLOW_TESTS."""
    for item in items:
        relative = _relative(item)
        if relative is None:
            continue
        if relative.split("/", 1)[0] in INTEROP_DIRS or relative.startswith(INTEROP_TESTS):
            item.add_marker(pytest.mark.interop)
        if relative.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


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
