"""``trackpoint verify``: read every block and tensor, report all damage, and ``--repair`` an interrupted overwrite."""

from __future__ import annotations

import argparse

import trackpoint as tp
from trackpoint.cli._arguments import Commands, command
from trackpoint.cli._output import Progress, out
from trackpoint.cli._resolve import resolve

__all__ = ["add_commands"]


def _verify(args: argparse.Namespace) -> int:
    prefix = resolve(args.path)
    if args.repair and tp.repair_checkpoint(prefix):
        out(f"REPAIRED: put back the previous version of {prefix}, which an interrupted overwrite had kept")
    progress = Progress("verify")
    try:
        problems = tp.verify_checkpoint(prefix, progress)
    finally:
        progress.close()
    if problems:
        for problem in problems:
            out(f"DAMAGED {problem.key if problem.key is not None else '(index)'}: {problem.message}")
        out(f"{len(problems)} problem(s) in {prefix}")
        return 1
    with tp.load_checkpoint(prefix) as reader:
        out(f"OK: {len(reader.get_variable_to_shape_map())} tensors in {reader.prefix}, every checksum verified")
    return 0


def add_commands(commands: Commands[argparse.ArgumentParser]) -> None:
    """Declare ``verify``."""
    verify = command(
        commands,
        "verify",
        _verify,
        "read every block and tensor, report every damaged key",
        "Read every index block and tensor and check every checksum; report all damage, not just the first, "
        "and an in-place overwrite that was interrupted (files that mix two versions, which TensorFlow cannot "
        "read). Exit 0 when intact, 1 otherwise.",
        "  trackpoint verify run/\n  trackpoint verify --repair run/weights",
    )
    verify.add_argument(
        "--repair",
        action="store_true",
        help="first put back the previous version an interrupted overwrite kept (default: off)",
    )
