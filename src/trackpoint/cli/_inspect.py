"""The reading commands: ``inspect`` (tensors and values), ``tree`` (the object graph) and ``diff``."""

from __future__ import annotations

import argparse
import math

import numpy as np

import trackpoint as tp
from trackpoint._io import OBJECT_GRAPH_KEY, printable
from trackpoint.cli._arguments import PATH_HELP, Commands, command, tolerance
from trackpoint.cli._output import Progress, dtype_name, json_value, out, print_json, shape_text
from trackpoint.cli._resolve import resolve, tensor_key

__all__ = ["add_commands"]


def _rows(reader: tp.CheckpointReader, args: argparse.Namespace) -> tuple[list[dict[str, object]], bool]:
    """The listing's rows (key, dtype, shape, object path, value when asked for), and whether the
    checkpoint has an object graph."""
    # A plain bundle has no object graph; any other failure to read one is reported.
    paths: dict[str, str] = {}
    if reader.has_tensor(OBJECT_GRAPH_KEY):
        with tp.CheckpointView(reader.prefix) as view:
            paths = view.key_paths()
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    keys = sorted(shapes)
    if args.tensor is not None:
        keys = [args.tensor if reader.has_tensor(args.tensor) else tensor_key(args.tensor, keys, paths, reader.prefix)]
    rows = []
    for key in keys:
        row: dict[str, object] = {
            "key": key,
            "dtype": dtype_name(dtypes.get(key, np.dtype(object))),
            "shape": shapes.get(key, []),
        }
        if key in paths:
            row["path"] = paths[key]
        if args.tensor is not None or args.all_tensors:
            row["value"] = reader.get_tensor(key)
        rows.append(row)
    return rows, bool(paths)


def _print_table(rows: list[dict[str, object]], graph: bool) -> None:
    # Escaped before measuring, so that the columns line up as printed.
    table = [("key", "dtype", "shape", "object" if graph else "")]
    table += [
        (
            printable(str(r["key"])),
            str(r["dtype"]),
            shape_text(r["shape"]),  # type: ignore[arg-type]
            printable(str(r.get("path", ""))),
        )
        for r in rows
    ]
    widths = [max(len(cells[i]) for cells in table) for i in range(3)]
    for cells in table:
        out("  ".join(f"{cell:<{width}}" for cell, width in zip(cells, widths + [0], strict=True)).rstrip())


def _inspect(args: argparse.Namespace) -> int:
    with tp.load_checkpoint(resolve(args.path)) as reader:
        rows, graph = _rows(reader, args)
        total = sum(math.prod(s) for s in reader.get_variable_to_shape_map().values())
        if args.json:
            for row in rows:
                if "value" in row:
                    row["value"] = json_value(row["value"])
            print_json({"checkpoint": reader.prefix, "tensors": rows, "total_params": total})
        elif args.tensor is not None or args.all_tensors:
            for row in rows:
                out(f"tensor: {row['key']} ({row['dtype']}) {row['shape']}")
                out(str(row["value"]))
        else:
            _print_table(rows, graph)
            out(f"\n# Total number of params: {total}")
    return 0


def _tree(args: argparse.Namespace) -> int:
    with tp.CheckpointView(resolve(args.path)) as view:
        out(view.tree())
    return 0


def _diff(args: argparse.Namespace) -> int:
    a, b = resolve(args.a), resolve(args.b)
    progress = Progress("diff")
    try:
        with tp.CheckpointView(a) as view:
            result = view.diff(b, rtol=args.rtol, atol=args.atol, progress=progress)
    finally:
        progress.close()
    if args.json:
        changed = [
            {
                "path": c.path,
                "attribute": c.attribute,
                "kind": c.kind,
                "detail": c.detail,
                "max_abs_diff": c.max_abs_diff,
            }
            for c in result.changed
        ]
        print_json(
            {"equal": result.equal, "added": list(result.added), "removed": list(result.removed), "changed": changed}
        )
        return 0 if result.equal else 1
    if result.equal:
        out("checkpoints are equal" + (f" (rtol={args.rtol}, atol={args.atol})" if args.rtol or args.atol else ""))
        return 0
    out(f"added (only in {args.b}): {len(result.added)}")
    for path in result.added:
        out(f"  + {path}")
    out(f"removed (only in {args.a}): {len(result.removed)}")
    for path in result.removed:
        out(f"  - {path}")
    out(f"changed: {len(result.changed)}")
    for change in result.changed:
        worst = f" (max |diff| {change.max_abs_diff:.6g})" if change.max_abs_diff is not None else ""
        out(f"  ~ {change.path} [{change.attribute}] {change.kind}: {change.detail}{worst}")
    return 1


def add_commands(commands: Commands[argparse.ArgumentParser]) -> None:
    """Declare ``inspect``, ``tree`` and ``diff``."""
    inspect = command(
        commands,
        "inspect",
        _inspect,
        "list the tensors of a checkpoint",
        "List a checkpoint's tensors (key, dtype, shape, object path) and its parameter count, or print values.",
        "  trackpoint inspect run/                               # the latest checkpoint of run/\n"
        "  trackpoint inspect run/ckpt-3 --tensor model.dense.kernel\n"
        "  trackpoint inspect run/ckpt-3 --all-tensors --json",
    )
    what = inspect.add_mutually_exclusive_group()
    what.add_argument(
        "--tensor", metavar="NAME", help="print one tensor's value: its key, or its object path (model.dense.kernel)"
    )
    what.add_argument("--all-tensors", action="store_true", help="print every tensor's value")
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    command(
        commands,
        "tree",
        _tree,
        "the object graph as an indented tree",
        "Print the object graph as an indented tree: each object with its values' dtype, shape and size, "
        "optimizer slots under their variables.",
        "  trackpoint tree run/ckpt-3",
    )
    diff = command(
        commands,
        "diff",
        _diff,
        "compare two checkpoints node by node (exit 1 when they differ)",
        "Compare two checkpoints object by object: added and removed objects, changed dtypes, shapes and "
        "values, largest difference first. Exit 0 when equal, 1 when different, 2 on trouble.",
        "  trackpoint diff run/ckpt-2 run/ckpt-3\n  trackpoint diff a/ckpt-1 b/ckpt-1 --atol 1e-6 --json",
        takes_path=False,
    )
    diff.add_argument("a", help=f"the first checkpoint: {PATH_HELP}")
    diff.add_argument("b", help="the second checkpoint, given the same way")
    diff.add_argument("--rtol", type=tolerance, default=0.0, help="relative tolerance, >= 0 (default: %(default)s)")
    diff.add_argument("--atol", type=tolerance, default=0.0, help="absolute tolerance, >= 0 (default: %(default)s)")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.set_defaults(error_status=2)
