"""``trackpoint demo``: train, checkpoint, crash, restore into fresh objects, continue exactly.

It uses only the public API, like any program would.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import numpy as np

import trackpoint as tp

STEPS = 60
SAVE_EVERY = 10
CRASH_AT = 30


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


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x @ rng.standard_normal((4, 2)) + 0.5 + 0.01 * rng.standard_normal((64, 2))).astype(np.float32)
    return x, y


def _tree(prefix: str) -> list[str]:
    """The checkpoint's objects as an indented tree, from its keys."""
    lines = ["(root)"]
    shown: set[tuple[str, ...]] = set()
    dtypes = tp.load_checkpoint(prefix).get_variable_to_dtype_map()
    for key, shape in tp.list_variables(prefix):
        if "/.ATTRIBUTES/" not in key:
            continue
        path = tuple(key.split("/.ATTRIBUTES/")[0].split("/"))
        for depth in range(1, len(path) + 1):
            if path[:depth] not in shown:
                shown.add(path[:depth])
                leaf = depth == len(path)
                dtype = "string" if dtypes[key] == np.dtype(object) else dtypes[key].name
                detail = f"  {dtype}{shape}" if leaf else ""
                lines.append("    " * depth + path[depth - 1] + detail)
    return lines


def run(directory: str | None, out: Callable[[str], None] = print) -> int:
    """Run the demo; return 0 when the resumed run equals an uninterrupted one."""
    directory = directory or tempfile.mkdtemp(prefix="trackpoint-demo-")
    os.makedirs(directory, exist_ok=True)
    x, y = _data()
    out(f"trackpoint demo: checkpoints in {directory}")

    reference = Trainer()
    for _ in range(STEPS):
        reference.train_step(x, y)

    first = Trainer()
    manager = tp.CheckpointManager(first.checkpoint, directory, max_to_keep=3)
    while int(first.step.numpy()) < CRASH_AT:
        loss = first.train_step(x, y)
        if int(first.step.numpy()) % SAVE_EVERY == 0:
            out(f"  step {int(first.step.numpy()):3d}  loss {loss:.5f}  saved {os.path.basename(manager.save())}")
    out(f"  -- simulated crash after step {CRASH_AT}: every object is thrown away --")
    del first, manager

    second = Trainer()
    manager = tp.CheckpointManager(second.checkpoint, directory, max_to_keep=3)
    restored = manager.restore_or_initialize()
    out(f"  fresh objects restored from {os.path.basename(restored or '')} at step {int(second.step.numpy())}")
    while int(second.step.numpy()) < STEPS:
        loss = second.train_step(x, y)
        if int(second.step.numpy()) % SAVE_EVERY == 0:
            out(f"  step {int(second.step.numpy()):3d}  loss {loss:.5f}  saved {os.path.basename(manager.save())}")

    pairs = [(reference.model.kernel, second.model.kernel), (reference.model.bias, second.model.bias)]
    pairs += [(reference.optimizer.get_slot(a, s), second.optimizer.get_slot(b, s)) for a, b in pairs for s in "mv"]
    same = all(np.array_equal(a.numpy(), b.numpy()) for a, b in pairs)
    out(f"resumed training equals an uninterrupted run of {STEPS} steps, optimizer slots included: {same}")
    out(f"kept checkpoints: {', '.join(os.path.basename(p) for p in manager.checkpoints)}")
    out(f"object graph of {os.path.basename(manager.latest_checkpoint or '')}:")
    for line in _tree(manager.latest_checkpoint or ""):
        out("  " + line)
    return 0 if same else 1
