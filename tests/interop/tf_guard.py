"""A pytest plugin: no test process holds TensorFlow (it runs in its own process, ``tf_process.py``).

Importing TensorFlow and then triton (which a CUDA build of torch brings) in one process segfaults. After
collection, and after each test, this fails the session or the test if ``tensorflow`` is in
``sys.modules``: the test that imported it is the one whose teardown fails. At the session's end it stops the
TensorFlow child that ``tf_process.py`` started in this process.
"""

from __future__ import annotations

import sys
from collections.abc import Generator

import pytest

from tests.interop import tf_process

MESSAGE = "tensorflow was imported in the pytest process: run TensorFlow through tests/interop/tf_process.py"


def tf_loaded() -> bool:
    return "tensorflow" in sys.modules


def pytest_collection_finish(session: pytest.Session) -> None:
    if tf_loaded():
        raise pytest.UsageError(f"collecting the tests: {MESSAGE}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    report = yield
    if call.when == "teardown" and tf_loaded() and not getattr(item.session, "_tf_reported", False):
        item.session._tf_reported = True  # type: ignore[attr-defined]  # once: later tests did not import it
        report.outcome = "failed"  # type: ignore[attr-defined]
        report.longrepr = f"after {item.nodeid}: {MESSAGE}"  # type: ignore[attr-defined]
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    tf_process.stop()
