"""The TensorFlow side of the interop tests: modules that only the TensorFlow child imports.

Each module imports TensorFlow at module level and offers functions that take and return plain data and
numpy arrays (see ``tests/interop/tf_process.py``); ``child.py`` runs them. The pytest process never imports
them (``tests/interop/conftest.py`` keeps them from doctest collection; ``tf_guard.py`` fails a test after
which TensorFlow is loaded).
"""
