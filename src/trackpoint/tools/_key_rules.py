"""The pieces of ``rewrite``'s planning shared by both kinds of checkpoint, and the plan by key.

A checkpoint without an object graph (TF1 ``Saver``) has only keys: there each rule's path is a
key or a key prefix (``layer`` covers ``layer`` and ``layer/...``, not ``layers``).

Examples:
    >>> under("layer/kernel", "layer"), under("layers", "layer")
    (True, False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trackpoint._io import DType, dtype_of, family
from trackpoint.errors import InvalidArgumentError, NotFoundError
from trackpoint.tools import _casting
from trackpoint.tools._tensor_copy import Item

__all__ = ["cast_for", "check_casts", "item_dtype", "plan_keys", "refuse_clash", "under"]


def cast_for(key: str, dtype: DType | None, rules: list[DType]) -> DType | None:
    """The last matching cast that changes a tensor of ``dtype``."""
    found = None
    for target in rules:
        if dtype is not None and _casting.applies(dtype, target):
            found = target
    return found


def under(key: str, path: str) -> bool:
    """Whether a rule for ``path`` covers ``key``: the key itself or one below it; ``""`` covers all."""
    return key == path or key.startswith(path + "/") or not path


def plan_keys(
    prefix: str,
    keys: list[str],
    renames: list[tuple[str, str]],
    drops: list[str],
    adds: dict[str, Any],
    casts: dict[str, DType],
    entries: Mapping[str, Any],
) -> list[Item]:
    """The result's tensors for a checkpoint without an object graph: every rule works on keys."""
    # Result key -> source key, in the order the source's data files hold them (as its writer
    # wrote them), so that a rewrite without rules writes the same files.
    current = {key: key for key in sorted(keys, key=lambda k: (entries[k].shard_id, entries[k].offset))}
    for what, path in (
        [("drop", p) for p in drops] + [("rename", p) for pair in renames for p in pair] + [("add", p) for p in adds]
    ):
        if not path:
            raise InvalidArgumentError(f"{prefix}: {what}: an empty key; name a key or a key prefix such as 'layer'")
    for path in drops:
        for k in _hit(prefix, "drop", path, current):
            del current[k]
    for old, new in renames:
        moved = {new + k[len(old) :]: current.pop(k) for k in _hit(prefix, "rename", old, current)}
        refuse_clash(prefix, f"rename {old!r} -> {new!r}", moved, current)
        current.update(moved)
    for path in adds:
        refuse_clash(prefix, f"add {path!r}", {path: ""}, current)
    items = []
    for key, source in current.items():
        entry = entries[source]
        rules = [t for p, t in casts.items() if under(key, p)]
        items.append(Item(key, source, cast=cast_for(key, entry.dtype, rules), shard_id=entry.shard_id))
    for path, value in adds.items():
        rules = [t for p, t in casts.items() if under(path, p)]
        items.append(Item(path, None, value, cast_for(path, dtype_of(value, path), rules)))
    check_casts(prefix, casts, items, entries, lambda item, p: under(item.key, p))
    return items


def _hit(prefix: str, what: str, path: str, current: Mapping[str, str]) -> list[str]:
    """The keys of ``current`` a ``what`` rule for ``path`` covers; at least one.

    Raises:
        NotFoundError: None.
    """
    hit = [k for k in current if under(k, path)]
    if not hit:
        raise NotFoundError(f"{prefix}: {what} {path!r}: no key is or starts with {path + '/'!r}", path=prefix)
    return hit


def refuse_clash(prefix: str, what: str, new: Mapping[str, str], existing: Mapping[str, str]) -> None:
    """Raise naming the first of the ``new`` keys that ``existing`` already holds."""
    clash = sorted(set(new) & set(existing))
    if clash:
        raise InvalidArgumentError(
            f"{prefix}: {what}: {clash[0]!r} already exists; drop it first or choose another name", path=prefix
        )


def check_casts(
    prefix: str, casts: Mapping[str, DType], items: list[Item], entries: Mapping[str, Any], covers: Any
) -> None:
    """Refuse a cast rule that changes nothing (a typo, or a family mismatch such as ints to floats)."""
    for path, target in casts.items():
        covered = [item for item in items if covers(item, path)]
        if not any(item.cast is not None for item in covered) and not any(
            item_dtype(item, entries) is not None and item_dtype(item, entries) == target for item in covered
        ):
            have = sorted({d.name for d in (item_dtype(i, entries) for i in covered) if d is not None})
            raise InvalidArgumentError(
                f"{prefix}: cast {path!r} to {target.name}: it covers no {family(target)} tensor "
                f"(it holds {', '.join(have) or 'no tensors'}); ints and floats are never cast into each "
                "other, nor bool, complex or string tensors",
                path=prefix,
            )


def item_dtype(item: Item, entries: Mapping[str, Any]) -> DType | None:
    """The dtype a planned tensor has before any cast; None for one trackpoint cannot read."""
    if item.source is None:
        return dtype_of(item.value, item.key)
    dtype: DType | None = entries[item.source].dtype
    return dtype
