"""Functions the tests of ``tf_process.py`` itself call in a child (test_tf_apart.py). No TensorFlow here:
they also run in a child started without it."""

from __future__ import annotations

import os
import sys
import time


def loaded(names: list[str]) -> dict[str, bool]:
    """Which of the modules ``names`` this process has imported."""
    return {name: name in sys.modules for name in names}


def echo(value: object) -> object:
    return value


def fail(message: str) -> None:
    raise KeyError(message)


def die(message: str) -> None:
    """Say ``message`` on stderr and end the process at once."""
    print(message, file=sys.stderr, flush=True)
    os._exit(3)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


class Opaque:
    """Not plain data: the pytest side refuses to unpickle it."""


def opaque() -> Opaque:
    return Opaque()
