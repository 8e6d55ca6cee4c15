"""The ``trackpoint`` command: its parser, built from each command group's module, and how a run ends.

The command groups: :mod:`._inspect` (inspect, tree, diff), :mod:`._verify`, :mod:`._convert`,
:mod:`._surgery` (rewrite, average, merge), :mod:`._report` and :mod:`._demo`; shared arguments (PATH,
``--storage-option``) in :mod:`._arguments`, output in :mod:`._output`.

Exit status: 0 success, 1 a damaged or missing checkpoint (one line on stderr), 2 bad usage.
``diff`` follows diff(1): 0 equal, 1 different, 2 trouble. When the reader of the output goes
away early (``trackpoint inspect big | head``), the command stops quietly with 141, the status
a shell reports for a program that SIGPIPE ended, so ``set -o pipefail`` scripts see what they
see with ``cat``. An output that cannot be written (closed, full) ends it with 1 (``diff``: 2)
and one line on stderr (see :mod:`trackpoint.cli._streams`).

Everything printed goes through :func:`._output.out`, which escapes what a crafted key or path could
use to move the cursor or reorder text.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

import trackpoint as tp
from trackpoint.cli import _convert, _demo, _inspect, _report, _surgery, _verify
from trackpoint.cli._arguments import STORAGE_OPTION_HELP, command, storage_option, use_storage_options
from trackpoint.cli._output import out
from trackpoint.cli._streams import run_with_streams

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    """The command line's parser, every subcommand declared."""
    made = argparse.ArgumentParser(
        prog="trackpoint",
        description="TensorFlow checkpoints without TensorFlow.",
        epilog="'trackpoint COMMAND --help' describes a command, with examples.",
    )
    made.add_argument("--version", action="version", version=f"%(prog)s {tp.__version__}")
    made.add_argument(
        "--storage-option",
        action="append",
        type=storage_option,
        metavar="KEY=VALUE",
        dest="storage_option_before",
        help=STORAGE_OPTION_HELP,
    )
    commands = made.add_subparsers(dest="command", required=True)
    _inspect.add_commands(commands)  # inspect, tree, diff
    _verify.add_commands(commands)
    _report.add_commands(commands)
    _demo.add_commands(commands)
    convert = command(
        commands,
        "convert",
        lambda args: _convert.run(args, out),
        _convert.SUMMARY,
        _convert.DESCRIPTION,
        _convert.EXAMPLES,
        takes_path=False,
    )
    _convert.add_arguments(convert)
    for surgery in _surgery.COMMANDS:  # rewrite, average, merge
        run = surgery.bind(out)
        sub = command(commands, surgery.name, run, surgery.summary, surgery.description, surgery.examples, False)
        surgery.add_arguments(sub)
    return made


def _run(args: argparse.Namespace) -> int:
    try:
        problem = use_storage_options(args)
        if problem is not None:
            out(f"trackpoint {args.command}: {problem}", sys.stderr)
            return 2
        return int(args.run(args))
    except BrokenPipeError:
        raise  # not a checkpoint's fault: run_with_streams ends quietly
    except (tp.errors.CheckpointError, OSError) as exc:  # OSError: what is not the library's, an unwritable --dir
        message = re.sub(r"\s*\n\s*", " ", str(exc).strip())  # one line; out escapes any other control
        out(f"trackpoint {args.command}: {message}", sys.stderr)
        return int(getattr(args, "error_status", 1))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parsed: list[argparse.Namespace] = []

    def run() -> int:
        parsed.append(parser().parse_args(argv))
        return _run(parsed[0])

    return run_with_streams(run, lambda: int(getattr(parsed[0], "error_status", 1)) if parsed else 1)
