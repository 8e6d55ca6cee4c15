"""``load_state_dict``: torch's one-shot load of a module, from a TensorFlow checkpoint, all or nothing."""

from __future__ import annotations

from typing import NamedTuple

import torch

import trackpoint as tp
from trackpoint.errors import InvalidArgumentError
from trackpoint.torch._nodes import module_node, unwrap

__all__ = ["IncompatibleKeys", "load_state_dict"]


class IncompatibleKeys(NamedTuple):
    """What :func:`load_state_dict` could not match, in torch's names (``fc.weight``)."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _find(view: tp.CheckpointView, prefix: str | None) -> tuple[int, str]:
    """The node of the module's subtree, and its path as given."""
    root = view.children(0)
    if prefix is None:
        return (root["model"], "model") if "model" in root else (0, "")
    node_id = 0
    for part in [p for p in prefix.split(".") if p]:
        children = view.children(node_id)
        if part not in children:
            raise InvalidArgumentError(
                f"{view.prefix}: no object at {prefix!r} (node {node_id} has {sorted(children)}); pass the prefix "
                "under which the module was saved, such as prefix='model'"
            )
        node_id = children[part]
    return node_id, prefix


def _value_names(view: tp.CheckpointView, node_id: int) -> set[str]:
    """The dotted name of every value below the node, by every path that reaches it (a tied
    weight under both of its names)."""
    names: set[str] = set()
    expanded: set[int] = set()
    queue = [(node_id, "")]
    while queue:
        current, path = queue.pop()
        if view.attributes(current) and current != node_id:
            names.add(path)
        if current in expanded:
            continue
        expanded.add(current)
        for local, child in view.children(current).items():
            queue.append((child, f"{path}.{local}" if path else local))
    return names


def load_state_dict(
    module: torch.nn.Module, path: str, strict: bool = True, prefix: str | None = None
) -> IncompatibleKeys:
    """Load a module's parameters, persistent buffers and extra state from a checkpoint, as
    ``module.load_state_dict(torch.load(...))`` would: by name, the names torch gives them.

    All or nothing: with ``strict``, a name missing on either side raises before anything is
    changed; a dtype or shape that differs always raises, naming the key, with nothing changed.
    A ``DistributedDataParallel`` or ``torch.compile`` wrapper adds nothing to the names.

    Args:
        module: The module to load into.
        path: A checkpoint prefix, or a directory with a ``checkpoint`` state file.
        strict: Whether a name on one side only is an error (else it is only returned).
        prefix: Where the module lies in the checkpoint's object graph, dotted (``"model"``,
            ``"model.encoder"``; ``""`` for the root). By default the root's child ``model``
            if there is one, else the root.

    Returns:
        The names of the module that the checkpoint lacks, and the checkpoint's names below
        the prefix that the module lacks.

    Raises:
        InvalidArgumentError: With ``strict``, names differ; or a dtype or shape differs.
        NotFoundError: Nothing is at ``path``.

    Example:
        >>> import tempfile, torch
        >>> import trackpoint.torch as tpt
        >>> path = tpt.Checkpoint(model=torch.nn.Linear(2, 1)).write(tempfile.mkdtemp() + "/ckpt")
        >>> tpt.load_state_dict(torch.nn.Linear(2, 1), path)
        IncompatibleKeys(missing_keys=[], unexpected_keys=[])
    """
    module = unwrap(module)
    with tp.CheckpointView(path) as view:
        node_id, found = _find(view, prefix)
        stored = _value_names(view, node_id)
        resolved = view.prefix
    expected = set(module.state_dict().keys())
    missing, unexpected = sorted(expected - stored), sorted(stored - expected)
    if strict and (missing or unexpected):
        lines = [
            f"{resolved}: the module and the checkpoint (at {found or 'the root'!r}) hold different names; nothing was loaded"
        ]
        if missing:
            lines.append("missing from the checkpoint: " + ", ".join(missing))
        if unexpected:
            lines.append("in the checkpoint but not the module: " + ", ".join(unexpected))
        lines.append("pass strict=False to load the names both have")
        raise InvalidArgumentError("\n".join(lines), path=resolved)
    node = module_node(module)
    parts = [p for p in found.split(".") if p]
    if not parts:
        checkpoint = tp.Checkpoint(node)
    else:
        holder: tp.Trackable = node
        for part in reversed(parts[1:]):
            outer = tp.AutoTrackable()
            setattr(outer, part, holder)
            holder = outer
        checkpoint = tp.Checkpoint(**{parts[0]: holder})
    checkpoint.read(resolved).expect_partial()
    return IncompatibleKeys(missing, unexpected)
