"""Interop tests compare with real TensorFlow (from the ``test`` extra); they fail, not skip, without it.

TensorFlow runs only in a child process of its own (``tf_process.py``); every module here carries the
``interop`` marker itself, so ``-m "not interop"`` leaves them out.
"""

from __future__ import annotations

# The TensorFlow side imports TensorFlow at module level: only the TensorFlow child imports it, never
# --doctest-modules in the pytest process.
collect_ignore = ["tf_side"]
