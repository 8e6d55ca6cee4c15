"""Saves forever in one of several modes, for test_crash.py to kill at random moments.

    python crash_child.py DIRECTORY MODE

DIRECTORY may be a URL (tests/storage/test_remote_kills.py). A MODE ending in ``_sharded``
cuts the checkpoint into data files of at most 512 KiB. The child prints ``ready`` once it
has restored (``run`` takes another signal, for a child forked by multiprocessing).

Every variable holds the step number, so a restored checkpoint must show one step
everywhere; a mix of two saves would show two.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np

import trackpoint as tp

SHAPES = [(512, 1024), (256,), (3, 4), ()] + [(16,)] * 200


def build(step: float) -> tuple[tp.Checkpoint, tp.Module, tp.optimizers.SGD]:
    model = tp.Module()
    model.big = tp.Variable(np.full(SHAPES[0], step, np.float32))
    model.rest = [tp.Variable(np.full(shape, step, np.float32)) for shape in SHAPES[1:]]
    model.tag = tp.Variable(f"step {step:g}".encode())
    opt = tp.optimizers.SGD(0.1, momentum=0.5)
    opt.add_slot(model.big, "momentum", np.full(SHAPES[0], step, np.float32))
    return tp.Checkpoint(model=model, opt=opt), model, opt


def set_step(model: tp.Module, opt: tp.optimizers.SGD, step: float) -> None:
    model.big.assign(np.full(SHAPES[0], step, np.float32))
    for v, shape in zip(model.rest, SHAPES[1:]):
        v.assign(np.full(shape, step, np.float32))
    model.tag.assign(f"step {step:g}".encode())
    opt.get_slot(model.big, "momentum").assign(np.full(SHAPES[0], step, np.float32))


def run(directory: str, mode: str, ready: Callable[[], object] = lambda: print("ready", flush=True)) -> None:
    """Restore the newest checkpoint in ``directory``, call ``ready``, then save forever."""
    ckpt, model, opt = build(0.0)
    options = tp.CheckpointOptions(enable_async="async" in mode)
    if mode.endswith("_sharded"):
        options.experimental_sharding_callback = tp.sharding.MaxShardSizePolicy(512 << 10)
    manager = tp.CheckpointManager(ckpt, directory, max_to_keep=2)
    restored = manager.restore_or_initialize()
    step = float(model.big.numpy()[0, 0]) if restored else 0.0
    ready()
    while True:
        step += 1
        set_step(model, opt, step)
        if mode.startswith("manager"):
            manager.save(options=options)
        elif mode.startswith("save"):
            ckpt.save(f"{directory}/ckpt", options=options)
        else:
            ckpt.write(os.path.join(directory, "fixed"), options=options)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
