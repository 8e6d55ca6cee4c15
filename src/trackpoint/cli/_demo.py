"""``trackpoint demo``: train, checkpoint, crash, restore into fresh objects, continue exactly.

It uses only the public API, like any program would (the command's declaration, at the end, uses the
command line's helpers). Its ``CheckpointManager`` replaces the
directory's ``checkpoint`` file and deletes the checkpoints it does not keep, so the demo writes
only into a directory that is new, empty, or holds nothing but an earlier demo's files: the
marker file :data:`MARKER`, which it writes first, and checkpoint files named as it names them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable

import numpy as np

import trackpoint as tp
from trackpoint.cli._arguments import Commands, command
from trackpoint.cli._output import out

STEPS = 60
SAVE_EVERY = 10
CRASH_AT = 30
MARKER = ".trackpoint-demo"
# The manager's files: the state file and ckpt-N files, and the temporaries a killed save leaves.
_OWN_FILE = re.compile(r"(checkpoint|ckpt-\d+\.(index|data-\d{5}-of-\d{5}))(\.tp-tmp-.+)?")


class Dense(tp.Module):
    """``y = x @ kernel + bias``."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.kernel = tp.Variable(np.zeros((n_in, n_out), np.float32), name="kernel")
        self.bias = tp.Variable(np.zeros(n_out, np.float32), name="bias")


class Trainer:
    """A linear regression model, its Adam optimizer, a step counter and their checkpoint."""

    def __init__(self) -> None:
        self.model = Dense(4, 2)
        self.optimizer = tp.optimizers.Adam(learning_rate=0.05)
        self.step = tp.Variable(np.int64(0), name="step", trainable=False)
        self.checkpoint = tp.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step)

    def train_step(self, x: np.ndarray, y: np.ndarray) -> float:
        error = x @ self.model.kernel.numpy() + self.model.bias.numpy() - y
        grad_kernel = (2.0 / len(x) * x.T @ error).astype(np.float32)
        grad_bias = (2.0 / len(x) * error.sum(axis=0)).astype(np.float32)
        self.optimizer.apply_gradients([(grad_kernel, self.model.kernel), (grad_bias, self.model.bias)])
        self.step.assign_add(1)
        return float(np.mean(error**2))

    def train(
        self, x: np.ndarray, y: np.ndarray, until: int, manager: tp.CheckpointManager, out: Callable[[str], None]
    ) -> None:
        """Train up to step ``until``, saving every ``SAVE_EVERY`` steps."""
        while int(self.step.numpy()) < until:
            loss = self.train_step(x, y)
            step = int(self.step.numpy())
            if step % SAVE_EVERY == 0:
                saved = manager.save() or ""  # None only when a checkpoint interval declines, and none is set
                out(f"  step {step:3d}  loss {loss:.5f}  saved {os.path.basename(saved)}")

    def arrays(self) -> list[np.ndarray]:
        """The model's values and the optimizer's slots for them: what resuming must reproduce."""
        variables = [self.model.kernel, self.model.bias]
        slots = [self.optimizer.get_slot(v, name) for v in variables for name in "mv"]
        return [v.numpy() for v in variables + [slot for slot in slots if slot is not None]]


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x @ rng.standard_normal((4, 2)) + 0.5 + 0.01 * rng.standard_normal((64, 2))).astype(np.float32)
    return x, y


def refusal(directory: str) -> str | None:
    """Why the demo must not write into ``directory``, or None when it may.

    Examples:
        >>> import tempfile
        >>> refusal(tempfile.mkdtemp()) is None
        True
    """
    if not os.path.lexists(directory):
        return None
    if not os.path.isdir(directory):
        return f"{directory} is not a directory; pass a new or empty directory with --dir, or leave --dir out"
    names = os.listdir(directory)
    own = MARKER in names  # without the marker, even ckpt-N files are someone else's checkpoints
    foreign = sorted(n for n in names if n != MARKER and not (own and _is_own(directory, n)))
    if not foreign:
        return None
    shown = ", ".join(foreign[:3]) + (f", ... ({len(foreign)} in all)" if len(foreign) > 3 else "")
    return (
        f"refusing to use {directory}: it holds files the demo did not write ({shown}), and the demo's "
        "CheckpointManager would replace its 'checkpoint' file and delete checkpoints; pass a new or empty "
        "directory with --dir, or leave --dir out for a temporary one"
    )


def _is_own(directory: str, name: str) -> bool:
    return _OWN_FILE.fullmatch(name) is not None and os.path.isfile(os.path.join(directory, name))


def _prepare(directory: str) -> None:
    """Claim ``directory`` for the demo, removing an earlier demo's checkpoints so the run starts afresh.

    Raises:
        InvalidArgumentError: The directory holds anything the demo did not write.
    """
    problem = refusal(directory)
    if problem is not None:
        raise tp.errors.InvalidArgumentError(problem)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, MARKER), "w", encoding="utf-8") as marker:
        marker.write(
            "Written by 'trackpoint demo', which reuses (and first empties) a directory holding only "
            "this file and its own checkpoints, and refuses any other non-empty directory.\n"
        )
    for name in os.listdir(directory):
        if _is_own(directory, name):
            os.remove(os.path.join(directory, name))


def run(directory: str | None, out: Callable[[str], None] = print) -> int:
    """Run the demo; return 0 when the resumed run equals an uninterrupted one.

    Raises:
        InvalidArgumentError: ``directory`` holds anything but an earlier demo's files (see :func:`refusal`).
    """
    directory = directory or tempfile.mkdtemp(prefix="trackpoint-demo-")
    _prepare(directory)
    x, y = _data()
    out(f"trackpoint demo: checkpoints in {directory}")

    reference = Trainer()
    for _ in range(STEPS):
        reference.train_step(x, y)

    first = Trainer()
    manager = tp.CheckpointManager(first.checkpoint, directory, max_to_keep=3)
    first.train(x, y, CRASH_AT, manager, out)
    out(f"  -- simulated crash after step {CRASH_AT}: every object is thrown away --")
    del first, manager

    second = Trainer()
    manager = tp.CheckpointManager(second.checkpoint, directory, max_to_keep=3)
    restored = manager.restore_or_initialize()
    out(f"  fresh objects restored from {os.path.basename(restored or '')} at step {int(second.step.numpy())}")
    second.train(x, y, STEPS, manager, out)

    expected, resumed = reference.arrays(), second.arrays()
    same = len(expected) == len(resumed) and all(np.array_equal(a, b) for a, b in zip(expected, resumed, strict=True))
    out(f"resumed training equals an uninterrupted run of {STEPS} steps, optimizer slots included: {same}")
    out(f"kept checkpoints: {', '.join(os.path.basename(p) for p in manager.checkpoints)}")
    latest = manager.latest_checkpoint or ""  # None only if nothing was saved, and the demo saves
    out(f"object graph of {os.path.basename(latest)}:")
    with tp.CheckpointView(latest) as view:
        for line in view.tree().split("\n"):
            out("  " + line)
    return 0 if same else 1


def _demo(args: argparse.Namespace) -> int:
    problem = refusal(args.dir) if args.dir else None
    if problem is not None:
        out(f"trackpoint demo: {problem}", sys.stderr)
        return 2
    return run(args.dir, out)


def add_commands(commands: Commands[argparse.ArgumentParser]) -> None:
    """Declare ``demo``."""
    demo = command(
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
