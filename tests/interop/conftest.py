"""Interop tests run real TensorFlow (from the ``test`` extra); they fail, not skip, without it.

Every test here carries the ``interop`` marker (tests/conftest.py): ``-m "not interop"`` leaves them out.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
