"""The ``rewrite``, ``average`` and ``merge`` subcommands: their arguments and what they run.

``trackpoint.cli`` declares each :data:`COMMANDS` entry with its ``command`` helper, then
lets the entry add its arguments. This module uses the public API and the tools' entry modules.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="trackpoint average")
    >>> AVERAGE.add_arguments(parser)
    >>> parser.parse_args(["a", "b", "-o", "out", "--ema", "0.9"]).ema
    0.9
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import trackpoint as tp
from trackpoint._io import OBJECT_GRAPH_KEY, bounded_json, family, from_numpy
from trackpoint.tools.rewrite import plan_rewrite
from trackpoint.tools.rewrite import source_prefix as rules_source

__all__ = ["AVERAGE", "COMMANDS", "MERGE", "REWRITE", "Command", "exact_array", "parse_add", "parse_pair"]


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, help texts, arguments and what runs it (given the CLI's printer)."""

    name: str
    run: Callable[[argparse.Namespace, Callable[[str], None]], int]
    summary: str
    description: str
    examples: str
    add_arguments: Callable[[argparse.ArgumentParser], None]

    def bind(self, out: Callable[[str], None]) -> Callable[[argparse.Namespace], int]:
        """:attr:`run` printing through ``out``: what ``argparse`` calls with the parsed arguments."""
        return lambda args: self.run(args, out)


def parse_pair(text: str, option: str) -> tuple[str, str]:
    """``LEFT=RIGHT`` split at the last ``=`` (paths hold no ``=`` a key would not escape).

    Examples:
        >>> parse_pair("model/encoder=model/backbone/encoder", "--rename")
        ('model/encoder', 'model/backbone/encoder')
    """
    left, sep, right = text.rpartition("=")
    if not sep or not right:
        raise tp.errors.InvalidArgumentError(
            f"{option} {text!r}: write it as LEFT=RIGHT, e.g. {option} model/w=model/v"
        )
    return left, right


def parse_add(text: str) -> tuple[str, np.ndarray]:
    """``PATH=FILE.npy`` or ``PATH=DTYPE:JSON`` (``model/scale=float32:[1,2]``) as ``(path, array)``.

    Examples:
        >>> parse_add("step=int64:7")
        ('step', array(7))
    """
    path, sep, spec = text.partition("=")
    if not sep or not path or not spec:
        raise tp.errors.InvalidArgumentError(
            f"--add {text!r}: write PATH=FILE.npy or PATH=DTYPE:VALUE, e.g. --add model/scale=float32:[1,1]"
        )
    if spec.endswith(".npy") and os.path.isfile(spec):
        try:
            return path, np.load(spec, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise tp.errors.InvalidArgumentError(f"--add {text!r}: cannot read {spec} as a .npy array: {exc}") from exc
    dtype, colon, value = spec.partition(":")
    try:
        if not colon:
            raise ValueError("no DTYPE:VALUE")
        target = np.dtype(dtype)
        parsed = bounded_json.loads(value, "the value")
    except (ValueError, TypeError) as exc:
        raise tp.errors.InvalidArgumentError(
            f"--add {text!r}: {exc}; give an existing FILE.npy or DTYPE:JSON such as float32:[1,2] or int64:0"
        ) from exc
    return path, exact_array(parsed, target, f"--add {text!r}")


def exact_array(value: Any, dtype: np.dtype, what: str) -> np.ndarray:
    """``value`` (parsed JSON: numbers, bools, strings, nested lists) as an array of ``dtype``, or an
    error naming the first element that would not keep its value.

    numpy converts silently (``1.5`` to int 1, ``1e10`` to float16 inf, ``true`` to int 1) or raises
    ``OverflowError`` (300 as int8); a variable added by hand must hold what was typed. A float may
    round to the target's precision (that is what choosing float16 means), but stays finite.

    Examples:
        >>> exact_array([1, 2], np.dtype("int8"), "--add x=int8:[1,2]")
        array([1, 2], dtype=int8)

    Raises:
        InvalidArgumentError: An element of the wrong kind, out of range, or not finite once converted.
    """
    try:
        known = from_numpy(dtype)
    except (TypeError, ValueError):
        known = None
    floating = known is not None and family(known) == "float" or dtype.kind in "fc"
    leaves = [value]
    while leaves:
        leaf = leaves.pop()
        if isinstance(leaf, list):
            leaves.extend(leaf)
            continue
        problem = _inexact(leaf, dtype, floating)
        if problem:
            shown = bounded_json.dumps(leaf, "the value")
            raise tp.errors.InvalidArgumentError(
                f"{what}: {shown} {problem}; write values that {dtype.name} holds (integers in "
                "range, bools only for bool, floats that stay finite), or give a FILE.npy of that dtype"
            )
    try:
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged lists, say
        raise tp.errors.InvalidArgumentError(f"{what}: {exc}; give one rectangular JSON array") from exc


def _inexact(leaf: Any, dtype: np.dtype, floating: bool) -> str | None:
    """Why ``leaf`` would not keep its value as ``dtype``, or None."""
    if isinstance(leaf, bool):
        return None if dtype.kind == "b" else f"is a bool, and {dtype.name} is not"
    if isinstance(leaf, (int, float)):
        if dtype.kind in "iu":
            if isinstance(leaf, float) and not leaf.is_integer():
                return f"is not an integer, which {dtype.name} would truncate"
            info = np.iinfo(dtype)
            if not info.min <= leaf <= info.max:
                return f"is outside {dtype.name}'s range [{info.min}, {info.max}]"
            return None
        if floating:
            try:
                with np.errstate(over="ignore", invalid="ignore"):
                    converted = np.asarray(leaf, dtype=dtype)
            except OverflowError:  # an int beyond even float64
                return f"is too large for {dtype.name}"
            if math.isfinite(leaf) and not np.isfinite(converted.astype(np.complex128)).all():
                return f"would become {converted} in {dtype.name} (choose a wider dtype)"
            return None
        return f"is a number, and {dtype.name} is not"
    if isinstance(leaf, str):
        return None if dtype.kind in "USO" else f"is a string, and {dtype.name} is not"
    return f"is a {type(leaf).__name__}, which no tensor holds"


def _add_rewrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="the checkpoint to read: a prefix, or a directory with a 'checkpoint' file")
    parser.add_argument("dst", help="the prefix to write (not the source)")
    parser.add_argument("--rename", action="append", metavar="OLD=NEW", help="move an object (repeatable)")
    parser.add_argument("--drop", action="append", metavar="PATH", help="drop an object or slots")
    parser.add_argument("--add", action="append", metavar="PATH=VALUE", help="add a variable: FILE.npy or DTYPE:JSON")
    parser.add_argument("--cast", action="append", metavar="PATH=DTYPE", help="cast floats or ints")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")


def _run_rewrite(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    rules: dict[str, Any] = {
        "rename": [parse_pair(r, "--rename") for r in args.rename or ()],
        "drop": args.drop or (),
        "add": dict(parse_add(a) for a in args.add or ()),
        "cast": dict(parse_pair(c, "--cast") for c in args.cast or ()),
    }
    if not args.dry_run:
        return _report(tp.rewrite(args.src, args.dst, **rules), out)
    steps = plan_rewrite(args.src, **rules)
    kept = {step.source for step in steps}
    for step in steps:
        cast = f"  [cast to {step.cast}]" if step.cast else ""
        out(f"{step.source if step.source is not None else '(added)'} -> {step.key}{cast}")
    with tp.load_checkpoint(rules_source(args.src)) as reader:
        for key in sorted(reader.get_variable_to_shape_map()):
            if key not in kept and key != OBJECT_GRAPH_KEY:
                out(f"{key} -> (dropped)")
    out(f"dry run: {len(steps)} tensors would be written to {args.dst}; nothing was written")
    return 0


def _report(written: str, out: Callable[[str], None]) -> int:
    with tp.load_checkpoint(written) as reader:
        out(f"wrote {written}: {len(reader.get_variable_to_shape_map())} tensors")
    return 0


def _add_average(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", nargs="+", help="checkpoints of one layout, oldest first")
    parser.add_argument("-o", "--output", required=True, help="the prefix to write")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--ema", type=float, metavar="DECAY", help="exponential moving average with this decay")
    weights.add_argument("--weights", metavar="W1,W2,...", help="one weight per checkpoint (normalized)")


def _run_average(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    weights: Any = None
    if args.ema is not None:
        weights = ("exponential", args.ema)
    elif args.weights is not None:
        try:
            weights = [float(w) for w in args.weights.split(",")]
        except ValueError as exc:
            raise tp.errors.InvalidArgumentError(f"--weights {args.weights!r}: {exc}; write e.g. 1,1,2") from exc
    return _report(tp.average(args.checkpoints, args.output, weights), out)


def _add_merge(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("parts", nargs="+", help="the part prefixes, in order (e.g. ck_temp/part-00000-of-00002)")
    parser.add_argument("-o", "--output", required=True, help="the merged checkpoint's prefix")


def _run_merge(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    return _report(tp.merge(args.parts, args.output), out)


REWRITE = Command(
    "rewrite",
    _run_rewrite,
    "rename, move, drop, add or cast variables, keeping the object graph consistent",
    "Write a changed copy of a checkpoint: move objects and subtrees (--rename), drop objects or optimizer "
    "slots (--drop; '.OPTIMIZER_SLOT/m' drops slot m of every variable), add variables (--add), cast float or "
    "int dtypes (--cast). Rules apply in that order: drop (source paths), rename, add, cast (result paths). "
    "The object graph, keys and slot references stay consistent, so TensorFlow restores the result into "
    "the changed objects. Without an object graph (TF1), paths are keys and apply to the keys below them.",
    "  trackpoint rewrite run/ckpt-3 out/ckpt --rename model/encoder=model/backbone/encoder\n"
    "  trackpoint rewrite run/ckpt-3 out/ckpt --drop optimizer --cast model=bfloat16\n"
    "  trackpoint rewrite run/ckpt-3 out/ckpt --drop .OPTIMIZER_SLOT/m --add model/scale=float32:[1,1]",
    _add_rewrite,
)
AVERAGE = Command(
    "average",
    _run_average,
    "the element-wise mean of checkpoints of one layout",
    "Average checkpoints of one layout (same keys, dtypes, shapes): floats accumulate in float64, every other "
    "tensor (steps, strings, the object graph) comes from the last checkpoint. Uniform weights by default.",
    "  trackpoint average run/ckpt-8 run/ckpt-9 run/ckpt-10 -o avg/ckpt\n"
    "  trackpoint average run/ckpt-8 run/ckpt-9 run/ckpt-10 -o ema/ckpt --ema 0.9",
    _add_average,
)
MERGE = Command(
    "merge",
    _run_merge,
    "merge per-task bundle parts into one checkpoint (TF's MergeBundles)",
    "Merge bundles written as separate parts (the <prefix>_temp/part-* a multi-device save leaves when its "
    "merge did not finish) into one checkpoint, as TensorFlow's MergeBundles does; data files are copied "
    "unchanged, the parts are left as they are.",
    "  trackpoint merge ck_temp/part-00000-of-00002 ck_temp/part-00001-of-00002 -o ck",
    _add_merge,
)
COMMANDS = (REWRITE, AVERAGE, MERGE)
