"""``python -m trackpoint.compat SCRIPT [ARGS...]``: run an unchanged TensorFlow script on trackpoint.

The script runs as ``__main__`` with ``sys.argv`` set to ``[SCRIPT, ARGS...]`` and its directory
first on ``sys.path``, as ``python SCRIPT ARGS...`` would run it, under
:func:`trackpoint.compat.as_tensorflow`. The exit status is the script's.
"""

from __future__ import annotations

import os
import runpy
import sys

from trackpoint.compat import as_tensorflow

USAGE = "usage: python -m trackpoint.compat SCRIPT [ARGS...]"


def main(argv: list[str]) -> int:
    """Run ``argv[0]`` with the arguments after it; return the exit status for a usage error."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    script = argv[0]
    if not os.path.isfile(script):
        print(f"trackpoint.compat: {script}: no such script\n{USAGE}", file=sys.stderr)
        return 2
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    with as_tensorflow():
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
