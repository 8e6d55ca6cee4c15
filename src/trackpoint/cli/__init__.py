"""The ``trackpoint`` command line: :func:`main`, one private module per command group.

``python -m trackpoint`` and the ``trackpoint`` console script both call :func:`main`.

Example:
    >>> from trackpoint.cli import main
    >>> main(["--version"]) if False else callable(main)
    True
"""

from __future__ import annotations

from trackpoint.cli._main import main

__all__ = ["main"]
