"""``python -m trackpoint``: the command-line interface."""

import sys

from trackpoint.cli import main

sys.exit(main())
