"""``load_state_dict``: torch's one-shot load of a module, from a TensorFlow checkpoint, all or nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
from torch.nn.parameter import is_lazy

import trackpoint as tp
from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError, NotFoundError
from trackpoint.protocol import VARIABLE_VALUE
from trackpoint.torch._nodes import EXTRA_STATE, extra_state_node, has_extra_state, tensor_node, unwrap
from trackpoint.torch._tensors import describe, dtype_name

__all__ = ["IncompatibleKeys", "load_state_dict"]

#: Paths :func:`_value_names` follows beyond those the module's names and the graph's nodes allow for.
_SPARE_PATHS = 10_000


class IncompatibleKeys(NamedTuple):
    """What :func:`load_state_dict` could not load, in torch's names (``fc.weight``)."""

    missing_keys: list[str]
    unexpected_keys: list[str]
    #: Names on both sides whose dtype or shape differ (left as they were; see ``strict``).
    mismatched_keys: list[str]


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


def _value_names(view: tp.CheckpointView, node_id: int, wanted: int) -> dict[str, dict[str, str]]:
    """The dotted name of every value below the node, by every path that reaches it, with its
    attributes (``{name: checkpoint key}``).

    Every path, as torch's ``state_dict`` names a module or tensor held under two attributes
    under both: a node reached again is expanded again (only a node on its own path is not,
    which would name values without end). The paths are bounded, since a graph of a few nodes
    can reach one by exponentially many (each node holding the next twice): by ``wanted``, the
    number of names the module itself holds, and the graph's size.

    Raises:
        InvalidArgumentError: The graph names its values by more paths than the bound.
    """
    limit = 4 * (wanted + len(view.object_graph.nodes)) + _SPARE_PATHS
    names: dict[str, dict[str, str]] = {}
    stack: list[tuple[int, str, frozenset[int]]] = [(node_id, "", frozenset())]
    visited = 0
    while stack:
        current, path, above = stack.pop()
        visited += 1
        if visited > limit:
            raise InvalidArgumentError(
                f"{view.prefix}: the object graph reaches the values below node {node_id} by more than {limit} "
                "paths (the same objects through many others), more than a module's names can be; restore it "
                "with tpt.Checkpoint, which visits each object once, or pass the prefix of the module's own subtree",
                path=view.prefix,
            )
        attributes = view.attributes(current)
        if attributes and current != node_id:
            names[path] = attributes
        inside = above | {current}
        for local, child in view.children(current).items():
            if child not in inside:
                stack.append((child, f"{path}.{local}" if path else local, inside))
    return names


def _mismatch(tensor: torch.Tensor, dtype: str, shape: list[int]) -> str | None:
    """How the stored value's dtype and shape differ from the tensor's, or None."""
    if is_lazy(tensor):  # no shape yet: it takes the checkpoint's
        held = dtype_name(tensor)
        return None if held == dtype else f"an uninitialized {held} tensor here, {dtype}{shape} in the checkpoint"
    current = describe(tensor)
    return None if current == f"{dtype}{shape}" else f"{current} here, {dtype}{shape} in the checkpoint"


def _leaf(module: torch.nn.Module, name: str, value: Any) -> Trackable:
    """The node that takes the value of state_dict name ``name`` (``value`` its state_dict entry)."""
    owner, _, local = name.rpartition(".")
    if local == EXTRA_STATE:
        sub = module.get_submodule(owner)
        if has_extra_state(sub):
            return extra_state_node(sub)
    return tensor_node(value, local)


def _mirror(module: torch.nn.Module, wanted: dict[str, Any]) -> tp.AutoTrackable:
    """A tree of holders with only ``wanted``'s nodes at their dotted names (the module's own
    nodes at the leaves), so that a restore reaches those values and no others."""
    root = tp.AutoTrackable()
    holders: dict[str, tp.AutoTrackable] = {"": root}
    for name, value in wanted.items():
        parent = ""
        parts = name.split(".")
        for part in parts[:-1]:
            path = f"{parent}.{part}" if parent else part
            if path not in holders:
                holders[path] = tp.AutoTrackable()
                setattr(holders[parent], part, holders[path])
            parent = path
        setattr(holders[parent], parts[-1], _leaf(module, name, value))
    return root


def _refuse_meta(current: dict[str, Any], path: str) -> None:
    """Refuse a module with tensors on the meta device, naming each (torch's own
    ``load_state_dict`` copies into them, which does nothing, and warns).

    Raises:
        InvalidArgumentError: Some of ``current`` (state_dict name -> value) are meta tensors.
    """
    meta = sorted(name for name, value in current.items() if isinstance(value, torch.Tensor) and value.is_meta)
    if meta:
        raise InvalidArgumentError(
            f"{path}: {', '.join(meta)} of the module are on the meta device, which holds no memory to load "
            "into; nothing was loaded. Materialize the module first (module.to_empty(device=...)), then load",
            path=path,
        )


def _mismatches(
    view: tp.CheckpointView, common: list[str], stored: dict[str, dict[str, str]], current: dict[str, Any]
) -> dict[str, str]:
    """Name -> how its stored tensor differs from the module's (dtype or shape), among ``common``."""
    mismatches = {}
    for name in common:
        key = stored[name].get(VARIABLE_VALUE)
        value = current[name]
        if key is not None and isinstance(value, torch.Tensor) and name.rpartition(".")[2] != EXTRA_STATE:
            try:
                dtype, shape, _ = view.describe(key)
            except NotFoundError:
                continue  # the restore names the missing key
            why = _mismatch(value, dtype, shape)
            if why is not None:
                mismatches[name] = why
    return mismatches


def _differ(
    resolved: str, found: str, missing: list[str], unexpected: list[str], mismatches: dict[str, str]
) -> InvalidArgumentError:
    """The error of a strict load whose module and checkpoint differ, naming every difference."""
    lines = [f"{resolved}: the module and the checkpoint (at {found or 'the root'!r}) differ; nothing was loaded"]
    if missing:
        lines.append("missing from the checkpoint: " + ", ".join(missing))
    if unexpected:
        lines.append("in the checkpoint but not the module: " + ", ".join(unexpected))
    lines.extend(f"{name}: {why}" for name, why in mismatches.items())
    lines.append("pass strict=False to load the names both hold with the same dtype and shape")
    return InvalidArgumentError("\n".join(lines), path=resolved)


def load_state_dict(
    module: torch.nn.Module,
    path: str,
    strict: bool = True,
    prefix: str | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> IncompatibleKeys:
    """Load a module's parameters, persistent buffers and extra state from a checkpoint, as
    ``module.load_state_dict(torch.load(...))`` would: by name, the names torch gives them.

    All or nothing: every name is compared (present on both sides, same dtype and shape)
    before anything is changed. With ``strict`` any difference raises, naming every one;
    without it the names both sides hold with the same dtype and shape are loaded and the
    rest returned, so a model whose head changed shape loads its backbone (torch raises on a
    shape mismatch even then). A lazy module's uninitialized tensors take the checkpoint's
    shapes. A ``DistributedDataParallel`` or ``torch.compile`` wrapper adds nothing to the names.

    Args:
        module: The module to load into.
        path: A checkpoint prefix, or a directory with a ``checkpoint`` state file.
        strict: Whether a name on one side only, or a dtype or shape that differs, is an
            error (else it is only returned, and that value left as it was).
        prefix: Where the module lies in the checkpoint's object graph, dotted (``"model"``,
            ``"model.encoder"``; ``""`` for the root). By default the root's child ``model``
            if there is one, else the root.
        storage_options: For a URL ``path``, options of its fsspec filesystem (``endpoint_url``,
            ``key``, ``secret``...), kept for every URL under its parent (never above the
            bucket), as ``tp.set_storage_options`` keeps them. Local paths take none.

    Returns:
        The names of the module that the checkpoint lacks, the checkpoint's names below the
        prefix that the module lacks, and the names whose dtype or shape differ.

    Raises:
        InvalidArgumentError: With ``strict``, names, dtypes or shapes differ; some of the
            module's tensors are on the meta device; or bad ``storage_options`` (not a mapping
            with ``str`` keys, or for a local path).
        NotFoundError: Nothing is at ``path``.

    Example:
        >>> import tempfile, torch
        >>> import trackpoint.torch as tpt
        >>> path = tpt.Checkpoint(model=torch.nn.Linear(2, 1)).write(tempfile.mkdtemp() + "/ckpt")
        >>> tpt.load_state_dict(torch.nn.Linear(2, 1), path)
        IncompatibleKeys(missing_keys=[], unexpected_keys=[], mismatched_keys=[])
    """
    module = unwrap(module)
    current = module.state_dict(keep_vars=True)
    _refuse_meta(current, path)
    with tp.CheckpointView(path, storage_options=storage_options) as view:
        node_id, found = _find(view, prefix)
        stored = _value_names(view, node_id, len(current))
        resolved = view.prefix
        common = sorted(stored.keys() & current.keys())
        mismatches = _mismatches(view, common, stored, current)
    missing, unexpected = sorted(current.keys() - stored.keys()), sorted(stored.keys() - current.keys())
    if strict and (missing or unexpected or mismatches):
        raise _differ(resolved, found, missing, unexpected, mismatches)
    wanted = {name: current[name] for name in common if name not in mismatches}
    holder: tp.Trackable = _mirror(module, wanted)
    for part in reversed([p for p in found.split(".") if p]):
        outer = tp.AutoTrackable()
        setattr(outer, part, holder)
        holder = outer
    tp.Checkpoint(holder).read(resolved).expect_partial()
    return IncompatibleKeys(missing, unexpected, sorted(mismatches))
