"""Interop tests run real TensorFlow (from the ``test`` extra); they fail, not skip, without it."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
