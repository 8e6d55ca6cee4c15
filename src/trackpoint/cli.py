"""The ``trackpoint`` command. It uses only the public API.

Exit status: 0 success, 1 a damaged or missing checkpoint (one line on stderr), 2 bad usage.
``diff`` follows diff(1): 0 equal, 1 different, 2 trouble.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import TextIO

import numpy as np

import trackpoint as tp


def _dtype_name(dtype: np.dtype) -> str:
    """TensorFlow's short dtype name (``tf.DType.name``) for a reader dtype."""
    return "string" if dtype == np.dtype(object) else dtype.name


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _json_value(value: object) -> object:
    """A JSON-safe rendering: bytes as text (undecodable bytes escaped), non-finite floats as strings."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return [_json_value(v) for v in value.tolist()] if value.ndim else _json_value(value.item())
        return _json_value(value.astype(np.float64).tolist() if value.dtype.kind == "V" else value.tolist())
    if isinstance(value, np.generic):
        return _json_value(value.item())
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, complex):
        return [_json_value(value.real), _json_value(value.imag)]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class _Progress:
    """A one-line progress bar on stderr, shown only when stderr is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.enabled = self.stream.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        width = 30
        filled = width * done // total
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {100 * done // total:3d}%")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * (len(self.label) + 40) + "\r")
            self.stream.flush()


def _key_paths(path: str) -> dict[str, str]:
    try:
        return tp.CheckpointView(path).key_paths()
    except (ValueError, tp.errors.CheckpointError):
        return {}  # a plain bundle has no object graph


def _inspect(args: argparse.Namespace) -> int:
    with tp.load_checkpoint(args.path) as reader:
        paths = _key_paths(reader.prefix)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
        keys = sorted(shapes)
        if args.tensor is not None:
            if not reader.has_tensor(args.tensor):
                print(f"Tensor {args.tensor} not found in checkpoint", file=sys.stderr)
                return 1
            keys = [args.tensor]
        rows = []
        for key in keys:
            dtype = dtypes.get(key, np.dtype(object))
            shape = shapes.get(key, [])
            row: dict[str, object] = {"key": key, "dtype": _dtype_name(dtype), "shape": shape}
            if key in paths:
                row["path"] = paths[key]
            if args.tensor is not None or args.all_tensors:
                row["value"] = reader.get_tensor(key)
            rows.append(row)
        total = sum(math.prod(s) for s in shapes.values())
        if args.json:
            for row in rows:
                if "value" in row:
                    row["value"] = _json_value(row["value"])
            print(json.dumps({"checkpoint": reader.prefix, "tensors": rows, "total_params": total}, indent=2))
            return 0
        if args.tensor is not None or args.all_tensors:
            for row in rows:
                print(f"tensor: {row['key']} ({row['dtype']}) {row['shape']}")
                print(row["value"])
            return 0
        width_key = max([len("key")] + [len(k) for k in keys])
        width_dtype = max([len("dtype")] + [len(str(r["dtype"])) for r in rows])
        shapes_text = [_shape_text(r["shape"]) for r in rows]  # type: ignore[arg-type]
        width_shape = max([len("shape")] + [len(s) for s in shapes_text])
        header = f"{'key':<{width_key}}  {'dtype':<{width_dtype}}  {'shape':<{width_shape}}"
        print((header + "  object" if paths else header).rstrip())
        for row, shape_text in zip(rows, shapes_text):
            line = f"{row['key']:<{width_key}}  {row['dtype']:<{width_dtype}}  {shape_text:<{width_shape}}"
            print((line + "  " + str(row.get("path", ""))).rstrip())
        print(f"\n# Total number of params: {total}")
        return 0


def _tree(args: argparse.Namespace) -> int:
    print(tp.CheckpointView(args.path).tree())
    return 0


def _diff(args: argparse.Namespace) -> int:
    progress = _Progress("diff")
    try:
        result = tp.CheckpointView(args.a).diff(args.b, rtol=args.rtol, atol=args.atol, progress=progress)
    finally:
        progress.close()
    if args.json:
        print(json.dumps({
            "equal": result.equal, "added": list(result.added), "removed": list(result.removed),
            "changed": [{"path": c.path, "attribute": c.attribute, "kind": c.kind, "detail": c.detail,
                         "max_abs_diff": c.max_abs_diff} for c in result.changed],
        }, indent=2))
        return 0 if result.equal else 1
    if result.equal:
        print("checkpoints are equal" + (f" (rtol={args.rtol}, atol={args.atol})" if args.rtol or args.atol else ""))
        return 0
    print(f"added (only in {args.b}): {len(result.added)}")
    for path in result.added:
        print(f"  + {path}")
    print(f"removed (only in {args.a}): {len(result.removed)}")
    for path in result.removed:
        print(f"  - {path}")
    print(f"changed: {len(result.changed)}")
    for change in result.changed:
        worst = f" (max |diff| {change.max_abs_diff:.6g})" if change.max_abs_diff is not None else ""
        print(f"  ~ {change.path} [{change.attribute}] {change.kind}: {change.detail}{worst}")
    return 1


def _verify(args: argparse.Namespace) -> int:
    progress = _Progress("verify")
    try:
        problems = tp.verify_checkpoint(args.path, progress)
    finally:
        progress.close()
    if problems:
        for problem in problems:
            print(f"DAMAGED {problem.key if problem.key is not None else '(index)'}: {problem.message}")
        print(f"{len(problems)} problem(s) in {args.path}")
        return 1
    with tp.load_checkpoint(args.path) as reader:
        print(f"OK: {len(reader.get_variable_to_shape_map())} tensors in {reader.prefix}, every checksum verified")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from trackpoint import demo

    return demo.run(args.dir)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trackpoint", description="TensorFlow checkpoints without TensorFlow.")
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="list the tensors of a checkpoint")
    inspect.add_argument("path", help="checkpoint prefix, or a directory with a 'checkpoint' state file")
    what = inspect.add_mutually_exclusive_group()
    what.add_argument("--tensor", metavar="NAME", help="print one tensor's value")
    what.add_argument("--all-tensors", action="store_true", help="print every tensor's value")
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    inspect.set_defaults(run=_inspect)
    tree = commands.add_parser("tree", help="the object graph as an indented tree")
    tree.add_argument("path", help="checkpoint prefix, or a directory with a 'checkpoint' state file")
    tree.set_defaults(run=_tree)
    diff = commands.add_parser("diff", help="compare two checkpoints node by node (exit 1 when they differ)")
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for values")
    diff.add_argument("--atol", type=float, default=0.0, help="absolute tolerance for values")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.set_defaults(run=_diff, error_status=2)
    verify = commands.add_parser("verify", help="read every block and tensor, report every damaged key")
    verify.add_argument("path", help="checkpoint prefix, or a directory with a 'checkpoint' state file")
    verify.set_defaults(run=_verify)
    demo = commands.add_parser("demo", help="train, checkpoint, crash, restore and continue exactly")
    demo.add_argument("--dir", help="where to keep the checkpoints (default: a new temporary directory)")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (tp.errors.CheckpointError, OSError, ValueError) as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message holds
        print(f"trackpoint {args.command}: {message}", file=sys.stderr)
        return int(getattr(args, "error_status", 1))
