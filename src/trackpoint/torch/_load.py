"""``load_state_dict``: torch's one-shot load of a module, from a TensorFlow checkpoint, all or nothing.

The checkpoint's values are named as ``tp.convert`` names them (object paths below ``prefix``,
dotted; a TF1 checkpoint's keys with ``/`` read as ``.``), then ``tp.convert``'s rules
(``only``, ``drop``, ``transpose``, ``rename``) turn those names into the module's
(:mod:`~trackpoint.torch._load_names`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import torch
from torch.nn.parameter import is_lazy

import trackpoint as tp
from trackpoint import Trackable
from trackpoint.errors import InvalidArgumentError, NotFoundError
from trackpoint.protocol import VARIABLE_VALUE, TensorOwner
from trackpoint.torch._load_names import Describe, Stored, key_values, open_view, renamed, view_values
from trackpoint.torch._nodes import EXTRA_STATE, extra_state_node, has_extra_state, tensor_node, unwrap
from trackpoint.torch._tensors import describe, dtype_name

if TYPE_CHECKING:
    from trackpoint.tools.convert import RenameRules

__all__ = ["IncompatibleKeys", "load_state_dict"]


class IncompatibleKeys(NamedTuple):
    """What :func:`load_state_dict` could not load, in torch's names (``fc.weight``)."""

    missing_keys: list[str]
    unexpected_keys: list[str]
    #: Names on both sides whose dtype or shape differ (left as they were; see ``strict``).
    mismatched_keys: list[str]


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


def _mirror(
    module: torch.nn.Module, wanted: dict[str, Any], names: dict[str, Stored], by_name: bool
) -> tp.AutoTrackable:
    """A tree of holders with only ``wanted``'s nodes (the module's own, at the leaves) at the
    paths of their values in the checkpoint, so that a restore reaches those values and no
    others; for a checkpoint without an object graph, one holder of nodes named by their keys."""
    root = tp.AutoTrackable()
    holders: dict[str, tp.AutoTrackable] = {"": root}
    for index, (name, value) in enumerate(wanted.items()):
        stored = names[name]
        node = _leaf(module, name, value)
        if by_name:
            setattr(root, f"v{index}", _Leaf(node, stored.attributes[VARIABLE_VALUE], stored.transposed))
            continue
        if stored.transposed:
            node = _Leaf(node, "", transposed=True)
        parent = ""
        parts = stored.source.split(".")
        for part in parts[:-1]:
            path = f"{parent}.{part}" if parent else part
            if path not in holders:
                holders[path] = tp.AutoTrackable()
                setattr(holders[parent], part, holders[path])
            parent = path
        setattr(holders[parent], parts[-1], node)
    return root


class _Leaf(Trackable):
    """A module tensor's node as a load with rules reaches it: its value transposed on the way
    in, and, from a checkpoint without an object graph, looked up under its key (its global
    name, see ``protocol.Saveable._tp_global_name``)."""

    _tp_global_name = True

    def __init__(self, node: Trackable, key: str, transposed: bool) -> None:
        self._node = cast(TensorOwner, node)
        self._key = key
        self._transposed = transposed

    def _checkpoint_tensor_names(self) -> tuple[str, ...]:
        return (VARIABLE_VALUE,)

    def _checkpoint_full_name(self) -> str:
        return self._key

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {} if self._transposed else self._node._tp_destinations()

    def _tp_check_restored(self, tensors: dict[str, Any]) -> Any:
        value = tensors[VARIABLE_VALUE]
        if self._transposed:  # TF's [in, out] kernel to torch's [out, in]
            value = np.ascontiguousarray(np.asarray(value).T)
        return self._node._tp_check_restored({VARIABLE_VALUE: value})

    def _tp_take_restored(self, checked: Any) -> None:
        self._node._tp_take_restored(checked)


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
    describe: Describe, common: list[str], names: dict[str, Stored], current: dict[str, Any], by_name: bool
) -> dict[str, str]:
    """Name -> how its stored tensor differs from the module's (dtype or shape), among ``common``."""
    mismatches = {}
    for name in common:
        stored = names[name]
        key = stored.attributes.get(VARIABLE_VALUE)
        value = current[name]
        if name.rpartition(".")[2] == EXTRA_STATE:
            if by_name:
                mismatches[name] = "a module's extra state, which a checkpoint without an object graph cannot hold"
            continue
        if key is not None and isinstance(value, torch.Tensor):
            try:
                dtype, shape = describe(key)
            except NotFoundError:
                continue  # the restore names the missing key
            why = _mismatch(value, dtype, shape[::-1] if stored.transposed else shape)
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
    rename: RenameRules | None = None,
    transpose: str | Iterable[str] | None = None,
    only: str | Iterable[str] | None = None,
    drop: str | Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> IncompatibleKeys:
    """Load a module's parameters, persistent buffers and extra state from a checkpoint, as
    ``module.load_state_dict(torch.load(...))`` would: by name, the names torch gives them.

    The checkpoint's values are named as ``tp.convert`` names them: by their object paths
    below ``prefix`` (``encoder.dense.kernel``), or, in a checkpoint without an object graph
    (TF1's ``Saver``), by their keys with ``/`` read as ``.``. ``tp.convert``'s rules, in the
    same syntax and order (``only``, ``drop``, ``transpose``, then ``rename``), turn those
    names into the module's, so a TF1 checkpoint loads in one call.

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
            if there is one, else the root. Without an object graph: the dotted key prefix
            (``"bert"`` for ``bert/...``) taken off the names; by default none.
        rename: ``'REGEX=REPLACEMENT'`` rules (or ``(regex, replacement)`` pairs in a list, or
            a dict), applied in order with :func:`re.sub` (see ``tp.convert``).
        transpose: Pattern(s) of 2-D values to transpose (TF's ``[in, out]`` kernels to torch's
            ``[out, in]``); matched against the names before renaming.
        only: Pattern(s) of which one a value's name must match to be loaded.
        drop: Pattern(s) of values left out (a TF1 checkpoint's ``global_step`` and Adam slots).
        storage_options: For a URL ``path``, options of its fsspec filesystem (``endpoint_url``,
            ``key``, ``secret``...), kept for every URL under its parent (never above the
            bucket), as ``tp.set_storage_options`` keeps them. Local paths take none.

    Returns:
        The module's names that the checkpoint lacks, the checkpoint's (renamed) names that
        the module lacks, and the names whose dtype or shape differ.

    Raises:
        InvalidArgumentError: With ``strict``, names, dtypes or shapes differ; some of the
            module's tensors are on the meta device; a malformed rule, two values renamed to
            one name, or a transposed value that is not 2-D; or bad ``storage_options`` (not a
            mapping with ``str`` keys, or for a local path).
        NotFoundError: Nothing is at ``path``.

    Examples:
        >>> import tempfile, torch
        >>> import trackpoint.torch as tpt
        >>> path = tpt.Checkpoint(model=torch.nn.Linear(2, 1)).write(tempfile.mkdtemp() + "/ckpt")
        >>> tpt.load_state_dict(torch.nn.Linear(2, 1), path)
        IncompatibleKeys(missing_keys=[], unexpected_keys=[], mismatched_keys=[])

        A TF1 checkpoint (``tf1_prefix``: ``w`` of shape [2], ``global_step``) into a module
        whose ``bias`` it holds under another name:

        >>> tpt.load_state_dict(torch.nn.Linear(3, 2), tf1_prefix, strict=False, rename="^w$=bias")
        IncompatibleKeys(missing_keys=['weight'], unexpected_keys=['global_step'], mismatched_keys=[])
    """
    from trackpoint.tools.convert import NameRules  # tp.convert's rules (the tools load on first use)

    rules = NameRules.make(rename=rename, only=only, drop=drop, transpose=transpose)
    module = unwrap(module)
    current = module.state_dict(keep_vars=True)
    _refuse_meta(current, path)
    graph = open_view(path, storage_options)
    if graph is not None:
        with graph as view:
            resolved = view.prefix
            found, stored, describe = view_values(view, prefix, len(current))
            names, mismatches = _compare(rules, stored, describe, resolved, current, by_name=False)
    else:
        with tp.load_checkpoint(path, storage_options=storage_options) as reader:
            resolved, found = reader.prefix, prefix or ""
            stored, describe = key_values(reader, found)
            names, mismatches = _compare(rules, stored, describe, resolved, current, by_name=True)
    missing, unexpected = sorted(current.keys() - names.keys()), sorted(names.keys() - current.keys())
    if strict and (missing or unexpected or mismatches):
        raise _differ(resolved, found, missing, unexpected, mismatches)
    wanted = {name: current[name] for name in sorted(names.keys() & current.keys()) if name not in mismatches}
    holder: tp.Trackable = _mirror(module, wanted, names, by_name=graph is None)
    if graph is not None:
        for part in reversed([p for p in found.split(".") if p]):
            outer = tp.AutoTrackable()
            setattr(outer, part, holder)
            holder = outer
    tp.Checkpoint(holder).read(resolved).expect_partial()
    return IncompatibleKeys(missing, unexpected, sorted(mismatches))


def _compare(
    rules: Any,
    stored: dict[str, dict[str, str]],
    describe: Describe,
    resolved: str,
    current: dict[str, Any],
    by_name: bool,
) -> tuple[dict[str, Stored], dict[str, str]]:
    """The checkpoint's values by the module's names, and how those both hold differ."""
    names = renamed(rules, stored, describe, resolved)
    common = sorted(names.keys() & current.keys())
    return names, _mismatches(describe, common, names, current, by_name)
