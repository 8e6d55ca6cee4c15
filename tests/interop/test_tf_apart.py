"""TensorFlow runs only in processes of its own: no test process holds both TensorFlow and torch.

Importing TensorFlow 2.21 and then triton (which a CUDA build of torch brings) in one process segfaults.
These pin that collecting the tests imports no TensorFlow, that ``tf_guard.py`` fails the test after which
the pytest process holds it, that the TensorFlow child holds TensorFlow and not torch, and how
``tf_process.py`` reports what its child raised, a child that died and a call that overran its time.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.interop import tf_guard
from tests.interop.tf_process import ROOT, TFChild, TFChildFailed, TFError, tf_side

pytestmark = pytest.mark.interop

SELF = "tests.interop.tf_side.selfcheck"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def test_collecting_the_tests_that_use_tensorflow_imports_no_tensorflow() -> None:
    """Every module that calls TensorFlow, collected (with their doctests) as the suite collects them; the
    guard is off here, so this sees what collection itself imports."""
    script = textwrap.dedent("""
        import sys, pytest
        paths = ["tests/interop", "tests/corrupt/test_overwrite_crash.py", "tests/graph/test_big_endian_variables.py"]
        code = pytest.main(["--collect-only", "-q", "-p", "no:tests.interop.tf_guard", *paths])
        print("exit", int(code), "tensorflow", "tensorflow" in sys.modules)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.stdout.splitlines()[-1] == "exit 0 tensorflow False", done.stdout[-3000:] + done.stderr[-3000:]


def test_the_guard_fails_the_test_after_which_the_pytest_process_holds_tensorflow(tmp_path) -> None:
    """A stand-in module named tensorflow (the real import takes seconds) is enough for the guard."""
    (tmp_path / "test_imports.py").write_text(
        textwrap.dedent("""
            import sys, types

            def test_clean():
                pass

            def test_imports_tensorflow():
                sys.modules["tensorflow"] = types.ModuleType("tensorflow")

            def test_after():
                pass
        """)
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.interop.tf_guard",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_imports.py",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout
    assert f"after test_imports.py::test_imports_tensorflow: {tf_guard.MESSAGE}" in done.stdout
    assert "3 passed, 1 error" in done.stdout  # the teardown of that test, once


def test_the_guard_fails_a_collection_that_imports_tensorflow(tmp_path) -> None:
    (tmp_path / "test_at_import.py").write_text(
        'import sys, types\nsys.modules["tensorflow"] = types.ModuleType("tensorflow")\n\n\ndef test_x():\n    pass\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.interop.tf_guard", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert f"collecting the tests: {tf_guard.MESSAGE}" in done.stderr


def test_the_tensorflow_child_holds_tensorflow_and_not_torch() -> None:
    assert tf_side("selfcheck").loaded(["tensorflow", "torch"]) == {"tensorflow": True, "torch": False}
    assert "tensorflow" not in sys.modules


def test_the_child_returns_plain_data_and_reports_what_it_raised() -> None:
    child = TFChild(preload=False)
    try:
        value = {"t": (1, b"x", [2.5]), "a": np.arange(3, dtype=np.float16), "s": np.int64(4)}
        back = child.call(SELF, "echo", (value,), {}, timeout=60)
        assert back["t"] == (1, b"x", [2.5]) and back["a"].dtype == np.float16 and back["s"] == 4
        with pytest.raises(TFError) as raised:
            child.call(SELF, "fail", ("no such key",), {}, timeout=60)
        assert raised.value.name == "KeyError" and raised.value.is_a("LookupError")
        assert raised.value.message == "'no such key'" and ", in fail\n" in str(raised.value)
        with pytest.raises(pickle.UnpicklingError, match="selfcheck.Opaque is not plain data"):
            child.call(SELF, "opaque", (), {}, timeout=60)
        assert child.call(SELF, "echo", ("still serving",), {}, timeout=60) == "still serving"
    finally:
        child.stop()


def test_a_child_that_dies_fails_the_call_with_its_stderr() -> None:
    child = TFChild(preload=False)
    try:
        with pytest.raises(TFChildFailed, match=r"(?s)died during .*selfcheck\.die \(exit status 3\).*last words"):
            child.call(SELF, "die", ("last words",), {}, timeout=60)
    finally:
        child.stop()


def test_a_call_that_overruns_its_time_kills_the_child() -> None:
    child = TFChild(preload=False)
    try:
        with pytest.raises(TFChildFailed, match=r"selfcheck\.sleep took longer than 1 s: the child was killed"):
            child.call(SELF, "sleep", (60,), {}, timeout=1)
        assert not child.alive()
    finally:
        child.stop()
