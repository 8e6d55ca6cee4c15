"""The doctests' namespace: docstring examples under src/ need not repeat their setup.

Loaded as a plugin by tests/conftest.py, so that its fixtures reach the doctests under src/.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

import trackpoint as tp


@pytest.fixture(scope="session")
def _doctest_prefix(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A saved checkpoint for docstring examples: ``model/w`` (float32[2, 3], ones) and ``step`` (int64 7)."""
    directory = tmp_path_factory.mktemp("doctest")
    model = tp.Module()
    model.w = tp.Variable(np.ones((2, 3), np.float32))
    return tp.Checkpoint(model=model, step=tp.Variable(np.int64(7))).write(os.path.join(directory, "ckpt"))


@pytest.fixture(scope="session")
def _doctest_tf1_prefix(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A checkpoint laid out as TF1's ``Saver`` writes one (no object graph, keys are global
    names): ``w`` (float32 [1, 2]) and ``global_step`` (int64 7)."""
    prefix = os.path.join(tmp_path_factory.mktemp("doctest_tf1"), "model.ckpt-7")
    tp.save_tensors(prefix, {"global_step": np.int64(7), "w": np.array([1.0, 2.0], np.float32)})
    return prefix


@pytest.fixture(autouse=True)
def _doctest_setup(request: pytest.FixtureRequest) -> None:
    """Docstring examples start with ``tp``, ``np``, ``os``, ``tempfile``, a saved ``prefix`` and a
    TF1 ``tf1_prefix`` defined.

    An example may still import and build what it shows (it stays runnable when copied); it need not.
    """
    if not isinstance(request.node, pytest.DoctestItem):
        return
    namespace = request.getfixturevalue("doctest_namespace")
    namespace.update(
        tp=tp,
        np=np,
        os=os,
        tempfile=tempfile,
        prefix=request.getfixturevalue("_doctest_prefix"),
        tf1_prefix=request.getfixturevalue("_doctest_tf1_prefix"),
    )
