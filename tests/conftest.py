"""Fixtures and hooks only; helpers that test modules import live in tests/helpers.py.

Markers (registered in pyproject.toml): ``interop`` for tests that run real TensorFlow, ``slow`` for the
crash, kill and fuzz tests and anything else that takes seconds. The tests carry them (a decorator, a module
``pytestmark``, or ``pytest.param(..., marks=...)``), nothing here adds one. ``python -m pytest -m "not
interop and not slow"`` is the inner loop; plain ``python -m pytest`` (CI) runs everything, both on every core.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import helpers
from tests.helpers import ReuseLog, reuse_log

# Scripts that import TensorFlow (the golden files' generator, a script the compat tests run with
# TensorFlow and without it): --doctest-modules must not import them.
collect_ignore = [
    "golden/make_golden.py",
    "compat/dump_weights.py",
    "keras/make_keras2.py",
    "keras/keras3_side.py",
    "keras/keras3_checkpoint.py",
]


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Iterator[int | pytest.ExitCode]:
    """Run on every core, two pytest-xdist workers per core, unless ``-n`` says otherwise.

    Two per core: many tests spend much of their time waiting (for child processes, for the S3
    server, for timeouts to expire), and with one worker per core a core idles meanwhile. Measured
    on the 2-core machine: 622 s with 2 workers, 557 s with 3, 478 s with 4.

    A default here rather than ``-n`` in ``addopts``: ``-p no:xdist`` (or pytest without xdist)
    would refuse an ``-n`` there. ``-n 0`` runs in this process, for print debugging, as ``--pdb``
    does. ``worksteal``: the slow tests take seconds to minutes each, and an idle worker takes
    queued tests from a busy one instead of waiting at the end.
    """
    workers = getattr(config.option, "numprocesses", 0)
    if workers is None and not hasattr(config, "workerinput"):  # xdist there, no -n, not a worker
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        config.option.numprocesses = 0 if config.option.usepdb else 2 * cores
        if config.option.dist == "no":
            config.option.dist = "worksteal"
    return (yield)


def pytest_configure(config: pytest.Config) -> None:
    # A plugin, not fixtures here: a conftest's fixtures reach only the tests below it, and the doctests
    # are under src/.
    config.pluginmanager.import_plugin("tests.doctest_fixtures")
    # No test process holds TensorFlow (with torch's triton it segfaults): it runs in a child of its own.
    config.pluginmanager.import_plugin("tests.interop.tf_guard")


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off: what a test frees, reference counting alone must free."""
    with helpers.no_gc():
        yield


@pytest.fixture
def reuse() -> Iterator[ReuseLog]:
    """What the ``trackpoint.reuse`` logger says during the test (see ``helpers.ReuseLog``)."""
    with reuse_log() as log:
        yield log
