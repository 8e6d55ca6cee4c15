"""The ``trackpoint`` command. It uses only the public API.

Exit status: 0 success, 1 a damaged or missing checkpoint (one line on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

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


def _inspect(args: argparse.Namespace) -> int:
    with tp.load_checkpoint(args.path) as reader:
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
        print(f"{'key':<{width_key}}  {'dtype':<{width_dtype}}  shape")
        for row in rows:
            print(f"{row['key']:<{width_key}}  {row['dtype']:<{width_dtype}}  {_shape_text(row['shape'])}")  # type: ignore[arg-type]
        print(f"\n# Total number of params: {total}")
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
    demo = commands.add_parser("demo", help="train, checkpoint, crash, restore and continue exactly")
    demo.add_argument("--dir", help="where to keep the checkpoints (default: a new temporary directory)")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (tp.errors.CheckpointError, OSError) as exc:
        print(f"trackpoint {args.command}: {exc}", file=sys.stderr)
        return 1
