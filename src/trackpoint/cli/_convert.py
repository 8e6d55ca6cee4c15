"""The ``trackpoint convert`` subcommand: its arguments and what it runs, on the public API.

``trackpoint.cli`` (:mod:`._main`) declares the subcommand and hands its parser to :func:`add_arguments`; malformed
rules and sizes are usage errors (exit 2) found while parsing, before anything is read.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> args = parser.parse_args(["run/ckpt-1", "out/", "--rename", "^model\\\\.=", "--shard-size", "500MB"])
    >>> args.rename, args.shard_size
    ([('^model\\\\.', '')], 500000000)
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import TextIO

import trackpoint as tp
from trackpoint._io import printable
from trackpoint.tools.convert import mapping_table, parse_rename, parse_size

__all__ = ["DESCRIPTION", "EXAMPLES", "SUMMARY", "add_arguments", "run"]

SUMMARY = "convert a TF checkpoint to safetensors, or safetensors to a TF checkpoint"
DESCRIPTION = (
    "Convert a TF checkpoint (object-based or TF1, any shard count) to safetensors, one file or sharded as "
    "Hugging Face does (model-00001-of-0000N.safetensors and model.safetensors.index.json), or safetensors "
    "weights (a file, an index or their directory) to a TF checkpoint at the prefix DST whose object graph is "
    "built from the dotted names. Tensors are named by object path (model.dense.kernel); optimizer slots, the "
    "object graph and save_counter are left out unless asked for. Patterns are Python regular expressions "
    "searched in the source-side name; --rename rules apply in order, after the filters."
)
EXAMPLES = (
    "  trackpoint convert run/ckpt-3 hf/                      # hf/model.safetensors\n"
    "  trackpoint convert run/ckpt-3 hf/ --shard-size 500MB --drop '^optimizer\\.'\n"
    "  trackpoint convert run/ckpt-3 hf/ --dry-run --rename '^model\\.=' --transpose 'kernel$'\n"
    "  trackpoint convert hf/model.safetensors.index.json back/ckpt"
)


def _rename(text: str) -> tuple[str, str]:
    try:
        return parse_rename(text)
    except tp.errors.InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pattern(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid regular expression: {exc}") from None
    return text


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except tp.errors.InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``trackpoint convert`` to ``parser``."""
    parser.add_argument("src", help="a TF checkpoint (prefix or directory), or a .safetensors file, index or directory")
    parser.add_argument(
        "dst", help="a directory or .safetensors file (from TF), or a checkpoint prefix such as out/ckpt (to TF)"
    )
    parser.add_argument(
        "--rename", action="append", type=_rename, metavar="REGEX=REPLACEMENT", help="repeatable, in order"
    )
    parser.add_argument("--only", action="append", type=_pattern, metavar="PATTERN", help="keep only these")
    parser.add_argument("--drop", action="append", type=_pattern, metavar="PATTERN", help="leave these out")
    parser.add_argument(
        "--transpose", action="append", type=_pattern, metavar="PATTERN", help="transpose these 2-D tensors"
    )
    parser.add_argument(
        "--keys",
        choices=["path", "tf"],
        help="name by object path or raw TF key (default: path)",
    )
    parser.add_argument("--include-slots", action="store_true", help="also convert optimizer slot variables")
    parser.add_argument("--include-save-counter", action="store_true", help="also convert the root's save_counter")
    parser.add_argument(
        "--include-graph",
        action="store_true",
        help="keep the whole checkpoint (TF keys, slots, object graph and strings in the metadata), so that "
        "converting back gives the same checkpoint; takes no rules",
    )
    parser.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="leave out (and list) strings and other tensors safetensors lacks",
    )
    parser.add_argument(
        "--shard-size", type=_size, default="5GB", metavar="SIZE", help="largest shard (default: %(default)s)"
    )
    parser.add_argument(
        "--save-counter",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="to TF: add a save_counter, as tf.train.Checkpoint.restore() expects; --no-save-counter for read() (default: %(default)s)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the mapping table, write nothing")


def run(args: argparse.Namespace, out: Callable[..., None] | None = None) -> int:
    """Run ``trackpoint convert``; ``out(text, stream=None)`` prints (escaped), by default to stdout."""
    write = out if out is not None else _print
    result = tp.convert(
        args.src,
        args.dst,
        keys=args.keys,
        rename=args.rename,
        only=args.only,
        drop=args.drop,
        transpose=args.transpose,
        include_slots=args.include_slots,
        include_save_counter=args.include_save_counter,
        include_graph=args.include_graph,
        skip_unsupported=args.skip_unsupported,
        max_shard_size=args.shard_size,
        save_counter=args.save_counter,
        dry_run=args.dry_run,
    )
    for key, reason in result.skipped:
        write(f"skipped {key}: {reason}", sys.stderr)
    if args.dry_run:
        write(mapping_table(result.mapping))
        write(f"{len(result.mapping)} tensor(s) would be converted ({result.direction}); nothing written")
        return 0
    write(f"converted {len(result.mapping)} tensor(s) ({result.direction}) into:")
    for path in result.files:
        write(f"  {path}")
    return 0


def _print(text: str, stream: TextIO | None = None) -> None:
    print("\n".join(printable(line) for line in text.split("\n")), file=stream or sys.stdout)
