"""``tf.train.CheckpointView`` and TF variables for split dependencies (test_tf_view.py, test_tf_view_match.py)."""

from __future__ import annotations

import tensorflow as tf

from tests.interop import structures
from tests.interop.tf_side.log import tf_log_lines


def save_view_structure(path: str) -> str:
    return structures.view_saved(tf.Variable, tf.Module, tf.train.Checkpoint, path)


def view(path: str) -> dict:
    """What ``tf.train.CheckpointView(path)`` says: children of every descendant, the descendants, and
    its diff against :func:`structures.view_live` (sorted matched ids, checkpoint-only ids, live-only count)."""
    theirs = tf.train.CheckpointView(path)
    match, only_ckpt, only_live = theirs.diff(structures.view_live(tf.Variable, tf.Module))
    return {
        "children": {node_id: theirs.children(node_id) for node_id in theirs.descendants()},
        "descendants": theirs.descendants(),
        "match": sorted(match),
        "only_checkpoint": only_ckpt,
        "only_live": len(only_live),
    }


def write_halves(path: str, first: list[float], second: list[float]) -> str:
    """A module ``obj`` with variables ``first_half`` and ``second_half``, written at ``path``."""
    source = tf.Module()
    source.first_half = tf.Variable(first)
    source.second_half = tf.Variable(second)
    return tf.train.Checkpoint(obj=source).write(path)


def read_halves(path: str) -> tuple[list, list]:
    """Zero ``obj.first_half``/``obj.second_half`` (2 floats each) read ``path`` with ``assert_consumed()``."""
    target = tf.Module()
    target.first_half = tf.Variable([0.0, 0.0])
    target.second_half = tf.Variable([0.0, 0.0])
    tf.train.Checkpoint(obj=target).read(path).assert_consumed()
    return target.first_half.numpy().tolist(), target.second_half.numpy().tolist()


def write_two_paths(path: str) -> str:
    """A checkpoint whose node 1 is reached by two edges (``root.a`` and ``root.b``)."""
    root = tf.Module()
    root.a = root.b = tf.Module()
    root.a.v = tf.Variable(1.0)
    return tf.train.Checkpoint(root=root).write(path)


def match_two_paths(path: str, shared_live: bool, phrase: str) -> tuple[list[int], bool, int]:
    """``tf.train.CheckpointView(path).match`` of :func:`structures.two_paths_live`: the matched ids,
    whether node 1 matched the live ``a``, and how many log lines carry ``phrase``."""
    live = structures.two_paths_live(tf.Variable, tf.Module, shared_live)
    matched: dict[int, object] = {}
    lines = tf_log_lines(lambda: matched.update(tf.train.CheckpointView(path).match(live)))
    return sorted(matched), matched[1] is live.a, len([line for line in lines if phrase in line])
