"""The ``trackpoint`` command. It uses the public API, plus helpers of ``_format`` (escaping, listings) and ``_storage``.

``--storage-option KEY=VALUE`` (repeatable, before or after the subcommand) gives every URL
argument of the subcommand those fsspec options, registered as a ``storage_options=`` keyword
registers them (:func:`trackpoint._storage.storage_options.use_storage_options_for_urls`), so
that the paths derived from the ones given (a directory's ``checkpoint`` object, a prefix's
data objects) get them too.

Exit status: 0 success, 1 a damaged or missing checkpoint (one line on stderr), 2 bad usage.
``diff`` follows diff(1): 0 equal, 1 different, 2 trouble. When the reader of the output goes
away early (``trackpoint inspect big | head``), the command stops quietly with 141, the status
a shell reports for a program that SIGPIPE ended, so ``set -o pipefail`` scripts see what they
see with ``cat``. An output that cannot be written (closed, full) ends it with 1 (``diff``: 2)
and one line on stderr (see :mod:`trackpoint.cli._streams`).

Everything printed that comes from a checkpoint or a path (keys, object names, file names,
error messages naming them) goes through :func:`_out`, which escapes control and other
non-printable characters: a crafted key cannot move the cursor, erase a line or reorder text.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import TextIO

import numpy as np

import trackpoint as tp
from trackpoint._io import (
    MAX_RANK,
    OBJECT_GRAPH_KEY,
    bounded_json,
    exists,
    is_directory,
    is_url,
    listing,
    printable,
    storage_for,
    use_storage_options_for_urls,
)
from trackpoint.cli import _convert, _surgery
from trackpoint.cli._arguments import tolerance
from trackpoint.cli._streams import run_with_streams

_CHECKPOINT_FILE = re.compile(r"\.(index|data-\d{5}-of-\d{5})$")


def _out(text: str, stream: TextIO | None = None) -> None:
    """Print ``text``, escaped line by line; the one way this module prints."""
    print("\n".join(printable(line) for line in text.split("\n")), file=stream or sys.stdout)


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


def _json(doc: object) -> None:
    # A value nests as deep as its tensor's rank (at most MAX_RANK, as the reader holds it), in
    # a document of three levels, and a complex element one more.
    _out(bounded_json.dumps(doc, "the output", max_depth=MAX_RANK + 4, indent=2))  # ensure_ascii escapes controls


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


# -- which checkpoint a PATH means ------------------------------------------------------


def _note_if_outside(directory: str, prefix: str) -> None:
    """Say so when ``directory``'s state file names a checkpoint that, links resolved, is not directly
    in it (the test CheckpointManager applies before deleting one): the bytes come from there."""
    real = storage_for(prefix).real_outside(directory, prefix)
    if real is not None:
        _out(f"note: the state file in {directory} names a checkpoint outside it: {real}", sys.stderr)


def _resolve(path: str) -> str:
    """The checkpoint prefix a command-line PATH means.

    PATH is a prefix, one of its files (``run/ckpt-1.index``, ``run/ckpt-1.data-00000-of-00001``),
    or a directory whose ``checkpoint`` file names one.

    Raises:
        NotFoundError: Nothing is there; the message lists the checkpoints that are.
    """
    if is_directory(path):
        state = tp.get_checkpoint_state(path)
        if state is None:
            raise tp.errors.NotFoundError(f"{path} has no 'checkpoint' state file{listing(path)}")
        prefix = state.model_checkpoint_path
        if not exists(prefix + ".index"):
            return path  # the library's message says what the state file names and what is missing
        _note_if_outside(path, prefix)
        return prefix
    if exists(path + ".index"):
        return path
    stripped = _CHECKPOINT_FILE.sub("", path)
    if stripped != path and exists(stripped + ".index"):
        return stripped
    raise tp.errors.NotFoundError(f"no checkpoint at {path}{listing(os.path.dirname(path))}")


def _tensor_key(name: str, keys: Iterable[str], paths: dict[str, str], prefix: str) -> str:
    """The key ``--tensor NAME`` means: a key, an object path as the listing shows it, with or
    without ``(root).`` (``model.dense.kernel``), or the key's object part (``model/dense/kernel``).

    Raises:
        NotFoundError: No tensor goes by that name; the message offers close ones.
        InvalidArgumentError: The name fits several tensors; the message lists their keys.
    """
    spellings: dict[str, set[str]] = {}
    preferred = {}
    for key in keys:
        names = {key, key.partition("/.ATTRIBUTES/")[0]}
        if key in paths:
            names |= {paths[key], paths[key].removeprefix("(root).")}
        for spelling in names:
            spellings.setdefault(spelling, set()).add(key)
        preferred[key] = paths[key].removeprefix("(root).") if key in paths else key
    found = sorted(spellings.get(name, ()))
    if len(found) == 1:
        return found[0]
    if found:
        raise tp.errors.InvalidArgumentError(
            f"{name!r} names {len(found)} tensors in {prefix}: {', '.join(found)}; pass one of these keys"
        )
    similar = sorted(s for s in spellings if name in s) or difflib.get_close_matches(name, list(spellings), 10)
    close = list(dict.fromkeys(preferred[k] for s in similar for k in sorted(spellings[s])))[:5]
    hint = f"; close names: {', '.join(close)}" if close else f"; 'trackpoint inspect {prefix}' lists them"
    raise tp.errors.NotFoundError(f"no tensor {name!r} in {prefix}{hint}")


# -- commands ---------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    with tp.load_checkpoint(_resolve(args.path)) as reader:
        # A plain bundle has no object graph; any other failure to read one is reported.
        paths: dict[str, str] = {}
        if reader.has_tensor(OBJECT_GRAPH_KEY):
            with tp.CheckpointView(reader.prefix) as view:
                paths = view.key_paths()
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
        keys = sorted(shapes)
        if args.tensor is not None:
            keys = [
                args.tensor if reader.has_tensor(args.tensor) else _tensor_key(args.tensor, keys, paths, reader.prefix)
            ]
        rows = []
        for key in keys:
            row: dict[str, object] = {
                "key": key,
                "dtype": _dtype_name(dtypes.get(key, np.dtype(object))),
                "shape": shapes.get(key, []),
            }
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
            _json({"checkpoint": reader.prefix, "tensors": rows, "total_params": total})
            return 0
        if args.tensor is not None or args.all_tensors:
            for row in rows:
                _out(f"tensor: {row['key']} ({row['dtype']}) {row['shape']}")
                _out(str(row["value"]))
            return 0
        # Escaped before measuring, so that the columns line up as printed.
        table = [("key", "dtype", "shape", "object" if paths else "")]
        table += [
            (
                printable(str(r["key"])),
                str(r["dtype"]),
                _shape_text(r["shape"]),  # type: ignore[arg-type]
                printable(str(r.get("path", ""))),
            )
            for r in rows
        ]
        widths = [max(len(cells[i]) for cells in table) for i in range(3)]
        for cells in table:
            _out("  ".join(f"{cell:<{width}}" for cell, width in zip(cells, widths + [0], strict=True)).rstrip())
        _out(f"\n# Total number of params: {total}")
        return 0


def _tree(args: argparse.Namespace) -> int:
    with tp.CheckpointView(_resolve(args.path)) as view:
        _out(view.tree())
    return 0


def _diff(args: argparse.Namespace) -> int:
    a, b = _resolve(args.a), _resolve(args.b)
    progress = _Progress("diff")
    try:
        with tp.CheckpointView(a) as view:
            result = view.diff(b, rtol=args.rtol, atol=args.atol, progress=progress)
    finally:
        progress.close()
    if args.json:
        _json(
            {
                "equal": result.equal,
                "added": list(result.added),
                "removed": list(result.removed),
                "changed": [
                    {
                        "path": c.path,
                        "attribute": c.attribute,
                        "kind": c.kind,
                        "detail": c.detail,
                        "max_abs_diff": c.max_abs_diff,
                    }
                    for c in result.changed
                ],
            }
        )
        return 0 if result.equal else 1
    if result.equal:
        _out("checkpoints are equal" + (f" (rtol={args.rtol}, atol={args.atol})" if args.rtol or args.atol else ""))
        return 0
    _out(f"added (only in {args.b}): {len(result.added)}")
    for path in result.added:
        _out(f"  + {path}")
    _out(f"removed (only in {args.a}): {len(result.removed)}")
    for path in result.removed:
        _out(f"  - {path}")
    _out(f"changed: {len(result.changed)}")
    for change in result.changed:
        worst = f" (max |diff| {change.max_abs_diff:.6g})" if change.max_abs_diff is not None else ""
        _out(f"  ~ {change.path} [{change.attribute}] {change.kind}: {change.detail}{worst}")
    return 1


def _verify(args: argparse.Namespace) -> int:
    prefix = _resolve(args.path)
    if args.repair and tp.repair_checkpoint(prefix):
        _out(f"REPAIRED: put back the previous version of {prefix}, which an interrupted overwrite had kept")
    progress = _Progress("verify")
    try:
        problems = tp.verify_checkpoint(prefix, progress)
    finally:
        progress.close()
    if problems:
        for problem in problems:
            _out(f"DAMAGED {problem.key if problem.key is not None else '(index)'}: {problem.message}")
        _out(f"{len(problems)} problem(s) in {prefix}")
        return 1
    with tp.load_checkpoint(prefix) as reader:
        _out(f"OK: {len(reader.get_variable_to_shape_map())} tensors in {reader.prefix}, every checksum verified")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from trackpoint.cli import _demo as demo

    problem = demo.refusal(args.dir) if args.dir else None
    if problem is not None:
        _out(f"trackpoint demo: {problem}", sys.stderr)
        return 2
    return demo.run(args.dir, _out)


# -- storage options --------------------------------------------------------------------

_STORAGE_OPTION_HELP = (
    "an option of the fsspec filesystem for every URL argument, e.g. endpoint_url=http://127.0.0.1:9000, "
    'key=..., secret=...; VALUE is read as JSON when it parses (use_ssl=false, client_kwargs={"region_name":'
    '"eu-west-1"}; quote a string that would: secret=\'"123"\'), else taken as text (repeatable)'
)


def _storage_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` as ``(key, value)``: the value parsed as JSON when it is JSON, else the text.

    The message of a malformed one never repeats it: it may hold a secret.

    Example:
        >>> _storage_option("use_ssl=false"), _storage_option("endpoint_url=http://127.0.0.1:9000")
        (('use_ssl', False), ('endpoint_url', 'http://127.0.0.1:9000'))
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            "expected KEY=VALUE, such as endpoint_url=http://127.0.0.1:9000 or key=... (got "
            + ("no '='" if not sep else "no KEY before '='")
            + ")"
        )
    try:
        return key.strip(), bounded_json.loads(value, "the value")
    except ValueError:  # not JSON: an endpoint, a key, a profile name
        return key.strip(), value


def _urls(args: argparse.Namespace) -> list[str]:
    """Every argument of the command that is a URL (alone or among several, as merge's parts)."""
    found: list[str] = []
    for value in vars(args).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and is_url(item) and item not in found:
                found.append(item)
    return found


def _use_storage_options(args: argparse.Namespace) -> str | None:
    """Register ``--storage-option``s for the command's URL arguments; the problem, if any."""
    given = (getattr(args, "storage_option_before", None) or []) + (getattr(args, "storage_option", None) or [])
    if not given:
        return None
    urls = _urls(args)
    if not urls:
        return (
            "--storage-option applies to URL arguments (s3://bucket/run, gs://...), and none was given; local "
            "paths take no storage options"
        )
    use_storage_options_for_urls(urls, dict(given))  # the last of a KEY given twice wins
    return None


# -- the parser -------------------------------------------------------------------------

_PATH_HELP = "checkpoint prefix (run/ckpt-3), one of its files, or a directory with a 'checkpoint' state file"


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Callable[[argparse.Namespace], int],
    summary: str,
    description: str,
    examples: str,
    takes_path: bool = True,
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` has a description and examples (kept as written), taking a PATH."""
    command = commands.add_parser(
        name,
        help=summary,
        description=textwrap.fill(description, 79),
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if takes_path:
        command.add_argument("path", help=_PATH_HELP)
    # Also after the subcommand, where it is typed beside the URLs (a dest of its own: a
    # subcommand's defaults would overwrite what the main parser collected).
    command.add_argument(
        "--storage-option", action="append", type=_storage_option, metavar="KEY=VALUE", help=_STORAGE_OPTION_HELP
    )
    command.set_defaults(run=run)
    return command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trackpoint",
        description="TensorFlow checkpoints without TensorFlow.",
        epilog="'trackpoint COMMAND --help' describes a command, with examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {tp.__version__}")
    parser.add_argument(
        "--storage-option",
        action="append",
        type=_storage_option,
        metavar="KEY=VALUE",
        dest="storage_option_before",
        help=_STORAGE_OPTION_HELP,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = _command(
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
    _command(
        commands,
        "tree",
        _tree,
        "the object graph as an indented tree",
        "Print the object graph as an indented tree: each object with its values' dtype, shape and size, "
        "optimizer slots under their variables.",
        "  trackpoint tree run/ckpt-3",
    )
    diff = _command(
        commands,
        "diff",
        _diff,
        "compare two checkpoints node by node (exit 1 when they differ)",
        "Compare two checkpoints object by object: added and removed objects, changed dtypes, shapes and "
        "values, largest difference first. Exit 0 when equal, 1 when different, 2 on trouble.",
        "  trackpoint diff run/ckpt-2 run/ckpt-3\n  trackpoint diff a/ckpt-1 b/ckpt-1 --atol 1e-6 --json",
        takes_path=False,
    )
    diff.add_argument("a", help=f"the first checkpoint: {_PATH_HELP}")
    diff.add_argument("b", help="the second checkpoint, given the same way")
    diff.add_argument("--rtol", type=tolerance, default=0.0, help="relative tolerance, >= 0 (default: %(default)s)")
    diff.add_argument("--atol", type=tolerance, default=0.0, help="absolute tolerance, >= 0 (default: %(default)s)")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.set_defaults(error_status=2)
    verify = _command(
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
    demo = _command(
        commands,
        "demo",
        _demo,
        "train, checkpoint, crash, restore and continue exactly",
        "Train a small model with Adam, checkpoint it with a CheckpointManager, simulate a crash, restore "
        "into fresh objects and show that training continues exactly. It refuses a --dir that holds "
        "anything but its own files from an earlier run.",
        "  trackpoint demo\n  trackpoint demo --dir /tmp/trackpoint-demo",
        takes_path=False,
    )
    demo.add_argument(
        "--dir",
        help="where to keep the checkpoints: new, empty, or an earlier demo's (default: a new temporary directory)",
    )
    convert = _command(
        commands,
        "convert",
        lambda args: _convert.run(args, _out),
        _convert.SUMMARY,
        _convert.DESCRIPTION,
        _convert.EXAMPLES,
        takes_path=False,
    )
    _convert.add_arguments(convert)
    for surgery in _surgery.COMMANDS:  # rewrite, average, merge
        run = surgery.bind(_out)
        sub = _command(commands, surgery.name, run, surgery.summary, surgery.description, surgery.examples, False)
        surgery.add_arguments(sub)
    return parser


def _run(args: argparse.Namespace) -> int:
    try:
        problem = _use_storage_options(args)
        if problem is not None:
            _out(f"trackpoint {args.command}: {problem}", sys.stderr)
            return 2
        return int(args.run(args))
    except BrokenPipeError:
        raise  # not a checkpoint's fault: run_with_streams ends quietly
    except (tp.errors.CheckpointError, OSError) as exc:  # OSError: what is not the library's, an unwritable --dir
        message = re.sub(r"\s*\n\s*", " ", str(exc).strip())  # one line; _out escapes any other control
        _out(f"trackpoint {args.command}: {message}", sys.stderr)
        return int(getattr(args, "error_status", 1))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parsed: list[argparse.Namespace] = []

    def run() -> int:
        parsed.append(_parser().parse_args(argv))
        return _run(parsed[0])

    return run_with_streams(run, lambda: int(getattr(parsed[0], "error_status", 1)) if parsed else 1)
