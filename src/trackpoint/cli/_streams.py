"""The ``trackpoint`` command's standard streams: output that cannot be written ends it quietly.

A command whose standard output is closed (``trackpoint inspect X >&-``), full (``>/dev/full``)
or failing exits with a nonzero status and one line on stderr, never a traceback. A reader
that goes away early (``trackpoint inspect X | head``) ends it silently with 141, the status a
shell reports for a program that SIGPIPE ended. A closed stderr swallows the messages meant for
it; they never go to stdout among the output.

Python gives no help here: with descriptor 1 closed at start ``sys.stdout`` is None and
``print`` drops everything without a word; ``argparse`` ignores a failed write of ``--version``
or ``--help`` and exits 0; and the interpreter flushes stdout once more on its way out, which
fails again and prints "Exception ignored". So the command writes through a guard that turns
any failure into :class:`OutputError`, and afterwards stdout is pointed at /dev/null (the recipe
in the documentation of Python's ``signal`` module) so that the last flush has nowhere to fail.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import TextIO, cast

__all__ = ["BROKEN_PIPE_STATUS", "OutputError", "run_with_streams"]

BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE, what the shell reports for a C program the signal ended


class OutputError(Exception):
    """Standard output could not be written. Not an ``OSError``: the command's own handlers,
    which report a checkpoint's files, leave it to :func:`run_with_streams`."""


class _Closed:
    """What stands for a descriptor that was closed when the interpreter started."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "it is closed")

    def flush(self) -> None:
        pass  # nothing written, nothing lost

    def isatty(self) -> bool:
        return False


class _Guarded:
    """``sys.stdout`` while a command runs: the real stream, whose failures (but a reader gone
    away, which ends the command with :data:`BROKEN_PIPE_STATUS`) raise :class:`OutputError`."""

    def __init__(self, stream: TextIO | _Closed) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as exc:  # ValueError: a stream closed by Python code
            raise OutputError(_reason(exc)) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as exc:
            raise OutputError(_reason(exc)) from exc

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)  # isatty, encoding...: as the real stream answers


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def run_with_streams(command: Callable[[], int], failure_status: Callable[[], int]) -> int:
    """Run ``command`` (parsing included) with guarded standard streams; return its exit status.

    Args:
        command: Parses the arguments and runs the command, returning its status.
        failure_status: The status when the output could not be written, asked then (``diff``
            answers 2, for trouble, where 1 would mean "different").

    Examples:
        >>> run_with_streams(lambda: print("hello") or 0, lambda: 1)
        hello
        0
    """
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, _Guarded(real_out if real_out is not None else _Closed()))
    if real_err is None:  # closed: print(file=None) would write the message to stdout
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - closed below
    try:
        try:
            return command()
        finally:
            sys.stdout.flush()  # output that fit a buffer meets its failure only here
    except BrokenPipeError:
        _discard(real_out)
        return BROKEN_PIPE_STATUS
    except OutputError as exc:
        _discard(real_out)
        _say(
            f"trackpoint: cannot write to standard output ({exc}); give the command an output it can write "
            "(a file on a disk with room, a pipe, or /dev/null to discard it)"
        )
        return failure_status()
    finally:
        if real_err is None:
            sys.stderr.close()
        sys.stdout, sys.stderr = real_out, real_err


def _discard(stream: TextIO | None) -> None:
    """Point ``stream``'s descriptor at /dev/null, so the interpreter's last flush of what it
    still buffers does not fail again on the way out."""
    if stream is None:
        return  # closed at start: the interpreter has nothing to flush
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # no file (captured in a test): nothing flushes it into the failed output


def _say(line: str) -> None:
    """One line on stderr, if it can be written (it may be closed or failing too)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
