"""The arguments every ``trackpoint`` command shares: a subcommand with its PATH and
``--storage-option``s, and argument types that refuse a bad value while parsing.

argparse reports a refusal as one line naming the option and exits with status 2, before any
checkpoint is opened.

``--storage-option KEY=VALUE`` (repeatable, before or after the subcommand) gives every URL
argument of the subcommand those fsspec options, registered as a ``storage_options=`` keyword
registers them, so that the paths derived from the ones given (a directory's ``checkpoint``
object, a prefix's data objects) get them too.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable

from trackpoint._io import bounded_json, urls_among, use_storage_options_for_urls

__all__ = ["PATH_HELP", "STORAGE_OPTION_HELP", "command", "storage_option", "tolerance", "use_storage_options"]

PATH_HELP = "checkpoint prefix (run/ckpt-3), one of its files, or a directory with a 'checkpoint' state file"
STORAGE_OPTION_HELP = (
    "an option of the fsspec filesystem for every URL argument, e.g. endpoint_url=http://127.0.0.1:9000, "
    'key=..., secret=...; VALUE is read as JSON when it parses (use_ssl=false, client_kwargs={"region_name":'
    '"eu-west-1"}; quote a string that would: secret=\'"123"\'), else taken as text (repeatable)'
)


def tolerance(text: str) -> float:
    """A ``--rtol``/``--atol`` value: a finite number >= 0.

    ``float()`` alone takes ``nan``, ``inf`` and negative numbers, with which ``numpy.isclose``
    only warns and then calls every value close: two different checkpoints came out equal.

    Examples:
        >>> tolerance("1e-6")
        1e-06
        >>> tolerance("nan")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: must be a finite number >= 0, not 'nan'
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}")
    return value


def storage_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` as ``(key, value)``: the value parsed as JSON when it is JSON, else the text.

    The message of a malformed one never repeats it: it may hold a secret.

    Examples:
        >>> storage_option("use_ssl=false"), storage_option("endpoint_url=http://127.0.0.1:9000")
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
    return urls_among(item for value in vars(args).values() for item in (value if isinstance(value, list) else [value]))


def use_storage_options(args: argparse.Namespace) -> str | None:
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


Commands = argparse._SubParsersAction  # what ArgumentParser.add_subparsers returns


def command(
    commands: Commands[argparse.ArgumentParser],
    name: str,
    run: Callable[[argparse.Namespace], int],
    summary: str,
    description: str,
    examples: str,
    takes_path: bool = True,
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` has a description and examples (kept as written), taking a PATH.

    Examples:
        >>> commands = argparse.ArgumentParser(prog="trackpoint").add_subparsers(dest="command")
        >>> tree = command(commands, "tree", lambda args: 0, "draw", "Draw the graph.", "  trackpoint tree run/")
        >>> tree.parse_args(["run/ckpt-1"]).path
        'run/ckpt-1'
    """
    parser = commands.add_parser(
        name,
        help=summary,
        description=textwrap.fill(description, 79),
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if takes_path:
        parser.add_argument("path", help=PATH_HELP)
    # Also after the subcommand, where it is typed beside the URLs (a dest of its own: a
    # subcommand's defaults would overwrite what the main parser collected).
    parser.add_argument(
        "--storage-option", action="append", type=storage_option, metavar="KEY=VALUE", help=STORAGE_OPTION_HELP
    )
    parser.set_defaults(run=run)
    return parser
