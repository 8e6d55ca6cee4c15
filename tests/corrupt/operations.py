"""What the corpus and the fuzzer do to a checkpoint: every reading path a user has."""

from __future__ import annotations

import os

import trackpoint as tp


def read_all(prefix: str) -> None:
    with tp.load_checkpoint(prefix) as reader:
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
        reader.debug_string()


def restore(prefix: str) -> None:
    tp.Checkpoint().read(prefix).expect_partial()


def view(prefix: str) -> None:
    v = tp.CheckpointView(prefix)
    v.descendants()
    v.tree()
    v.match(tp.Module())
    restore(prefix)


def latest(prefix: str) -> None:
    tp.latest_checkpoint(os.path.dirname(prefix))


def load_dir(prefix: str) -> None:
    tp.load_checkpoint(os.path.dirname(prefix))


def everything(prefix: str) -> None:
    """Every path, each allowed to fail with a trackpoint error, none with anything else."""
    for operation in (read_all, restore, view, latest, tp.verify_checkpoint):
        try:
            operation(prefix)
        except tp.errors.CheckpointError:
            pass


OPERATIONS = {"read_all": read_all, "restore": restore, "view": view, "latest": latest, "load_dir": load_dir}
