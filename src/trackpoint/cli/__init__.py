"""The ``trackpoint`` command line: :func:`main`, one private module per command group.

``python -m trackpoint`` and the ``trackpoint`` console script both call :func:`main`.

Examples:
    >>> import numpy as np, os, tempfile, trackpoint as tp
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> _ = tp.save_tensors(prefix, {"w": np.zeros(3, np.float32)})
    >>> main(["verify", prefix])
    OK: 1 tensors in ..., every checksum verified
    0
"""

from __future__ import annotations

from trackpoint.cli._main import main

__all__ = ["main"]
