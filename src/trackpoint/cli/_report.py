"""``trackpoint report``: one self-contained HTML page that shows a checkpoint, or what changed between two."""

from __future__ import annotations

import argparse

from trackpoint._io import write_file
from trackpoint.cli._arguments import Commands, command
from trackpoint.cli._output import Progress, out

__all__ = ["add_commands"]


def _report(args: argparse.Namespace) -> int:
    from trackpoint.cli._report_page import render
    from trackpoint.tools.report import report

    progress = Progress("report")
    try:
        data = report(args.path, args.other, progress)
    finally:
        progress.close()
    write_file(args.output, render(data).encode("utf-8"), durable=False)
    shown = data["inputs"][-1]
    what = f"{shown['tensors']} tensors, {shown['params']:,} parameters"
    compared = f", compared with {data['inputs'][0]['path']}" if args.other is not None else ""
    out(f"wrote {args.output}: {what}{compared}")
    return 0


def add_commands(commands: Commands[argparse.ArgumentParser]) -> None:
    """Declare ``report``."""
    report = command(
        commands,
        "report",
        _report,
        "write one HTML page showing a checkpoint, or what changed between two",
        "Write one self-contained HTML file (no network needed: its script and styles are inline) that shows "
        "PATH, a TF checkpoint or safetensors weights: the objects as a tree that expands and collapses, "
        "optimizer slots under their variables, dtype, shape, bytes and parameters summed per subtree, and for "
        "each tensor its mean, standard deviation, min, max, fraction of zeros, NaN and Inf counts and a "
        "histogram, computed while each tensor is read in chunks. With OTHER, the page shows OTHER and how it "
        "differs from PATH: added, removed and renamed keys (a rename is found by dtype, shape and content hash) "
        "and per tensor the relative L2 change and cosine similarity, with a strip of change per layer. Every "
        "checksum is verified on the way; a progress bar shows on a terminal.",
        "  trackpoint report run/ -o report.html\n"
        "  trackpoint report run/ckpt-1 run/ckpt-9 -o change.html\n"
        "  trackpoint report hf/model.safetensors -o weights.html",
    )
    report.add_argument("other", nargs="?", help="a second checkpoint or safetensors weights to compare PATH with")
    report.add_argument("-o", "--output", required=True, help="the HTML file to write (replaced atomically)")
