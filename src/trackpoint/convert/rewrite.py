"""Surgery on a TF checkpoint: rename or move objects, drop values or optimizer slots, add variables, cast.

The result is a checkpoint TensorFlow restores into the correspondingly changed objects: its
object graph is laid out as TF would save them (see :mod:`.graph_edit`), every attribute's
``checkpoint_key`` is the key its tensor is stored under, slot references point at the right
nodes. Tensors are copied one at a time, so memory holds one tensor (the largest) at most.

Rules apply in this order, each to the result of the ones before:

1. ``drop``: object paths as the source names them. ``model/dense`` drops that object and
   what only it leads to (its variables' optimizer slots too); ``.OPTIMIZER_SLOT/m`` drops slot
   ``m`` of every variable, ``model/w/.OPTIMIZER_SLOT/m`` only ``model/w``'s, and
   ``model/w/.OPTIMIZER_SLOT/optimizer/m`` only that optimizer's.
2. ``rename``: ``{old path: new path}`` in order; a whole subtree moves, and missing parents
   of the new path are created (empty objects, as a ``tf.Module`` with only children).
3. ``add``: ``{new variable path: array}``.
4. ``cast``: ``{path: dtype}`` in result paths, for the object, its descendants and their
   slots; see :mod:`.casting` for which casts are allowed.

A checkpoint without an object graph (TF1 ``Saver``) has no objects: there every path is a
key, and a rule for ``a/b`` also applies to the keys below it (``a/b/...``).

Example:
    >>> import numpy as np, os, tempfile
    >>> import trackpoint as tp
    >>> d = tempfile.mkdtemp()
    >>> module = tp.Module(); module.w = tp.Variable(np.ones(2, np.float32))
    >>> path = tp.Checkpoint(model=module).write(os.path.join(d, "src"))
    >>> out = rewrite(path, os.path.join(d, "dst"), rename={"model/w": "model/enc/w"}, cast={"model": "float16"})
    >>> tp.load_checkpoint(out).get_tensor("model/enc/w/.ATTRIBUTES/VARIABLE_VALUE")
    array([1., 1.], dtype=float16)
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from trackpoint._format import slices
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import dtype_of
from trackpoint._format.dtypes import DType
from trackpoint._format.state_file import resolve_prefix
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint._graph.object_graph import read_object_graph
from trackpoint.convert import casting
from trackpoint.convert.graph_edit import GraphEdit
from trackpoint.convert.object_paths import tf_paths
from trackpoint.convert.tensor_copy import Item, write_items
from trackpoint.errors import InvalidArgumentError, NotFoundError

__all__ = ["rewrite", "source_prefix"]


def rewrite(
    src: str,
    dst: str,
    rename: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    drop: Iterable[str] = (),
    add: Mapping[str, Any] | None = None,
    cast: Mapping[str, Any] | None = None,
) -> str:
    """Write a changed copy of the checkpoint ``src`` to the prefix ``dst`` (see the module docstring).

    Every rule is checked before anything is written, and the write is atomic: on any error
    ``dst`` keeps what it held before.

    Args:
        src: A checkpoint prefix, or a directory with a ``checkpoint`` state file.
        dst: The prefix to write (its ``.index`` and ``.data-*`` files); not ``src`` itself.
        rename: ``{old path: new path}``, applied in order.
        drop: Paths to drop, or slot rules such as ``".OPTIMIZER_SLOT/m"``.
        add: ``{path: array}`` of new variables.
        cast: ``{path: dtype}``, e.g. ``{"model": "bfloat16"}``.

    Returns:
        ``dst``.

    Raises:
        NotFoundError: A rule names a path that does not exist.
        InvalidArgumentError: A rule is malformed, conflicts with an existing name, moves an
            object into its own subtree, or casts a value it would lose.
        DataLossError: A tensor of ``src`` is damaged.

    Example:
        >>> import numpy as np, os, tempfile
        >>> import trackpoint as tp
        >>> d = tempfile.mkdtemp()
        >>> src = tp.save_tensors(os.path.join(d, "v1"), {"a/w": np.ones(2), "b": np.zeros(1)})
        >>> out = rewrite(src, os.path.join(d, "v2"), rename={"a": "enc"}, drop=["b"])
        >>> tp.list_variables(out)
        [('enc/w', [2])]
    """
    prefix = source_prefix(src)
    dst = os.fspath(dst)
    renames = _pairs(rename)
    drops = _strings(drop, "drop")
    adds = dict(add or {})
    casts = {path: casting.target_dtype(spec, f"{path}={spec}") for path, spec in dict(cast or {}).items()}
    if os.path.realpath(dst) == os.path.realpath(prefix):
        raise InvalidArgumentError(
            f"rewrite: the destination {dst!r} is the source checkpoint; write to a new prefix", path=dst
        )
    for path, value in adds.items():
        _check_value(path, value)
    with BundleReader(prefix) as bundle:
        entries = {e.key: e for e in bundle.entries()}
        visible = [key for key in entries if key not in _slice_keys(entries)]
        graph = read_object_graph(bundle)
        if graph is None:
            items, graph_bytes = _plan_keys(prefix, visible, renames, drops, adds, casts, entries), None
        else:
            items, graph_bytes = _plan_graph(prefix, graph, visible, renames, drops, adds, casts, entries)
        write_items(bundle, dst, items, graph_bytes)
    return dst


def source_prefix(src: str) -> str:
    """The prefix of the checkpoint ``src`` names: itself when ``src.index`` exists (even a prefix
    ending in ``/``, as ``Saver.save(sess, "model/")`` writes ``model/.index``), else through
    a directory's ``checkpoint`` state file."""
    path = os.fspath(src)
    if isinstance(path, str) and os.path.isfile(path + ".index"):
        return path
    return resolve_prefix(path)


def _check_value(path: str, value: Any) -> None:
    """Refuse an added value no checkpoint can hold before anything is written."""
    if dtype_of(value, f"add {path!r}").is_string and not isinstance(value, (bytes, str)):
        for element in np.asarray(value, dtype=object).reshape(-1):
            if not isinstance(element, (bytes, str)):
                raise InvalidArgumentError(
                    f"add {path!r}: a string tensor's element of type {type(element).__name__} is not bytes or str; "
                    "pass a numeric array or strings"
                )


def _pairs(rename: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
    pairs = list(rename.items()) if isinstance(rename, Mapping) else list(rename or ())
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise InvalidArgumentError(f"rename: {pair!r} is not an (old path, new path) pair of str")
    return pairs


def _strings(values: Iterable[str], what: str) -> list[str]:
    if isinstance(values, str):
        return [values]
    out = list(values)
    for value in out:
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{what}: {value!r} is a {type(value).__name__}; pass paths as str")
    return out


def _slice_keys(entries: Mapping[str, Any]) -> set[str]:
    hidden = set()
    for entry in entries.values():
        for proto in entry.slices:
            hidden.add(
                slices.encode_slice_key(entry.key, slices.extents_from_proto(proto)).decode("utf-8", "surrogateescape")
            )
    return hidden


def _cast_for(key: str, dtype: DType | None, rules: list[DType]) -> DType | None:
    """The last matching cast that changes a tensor of ``dtype``."""
    found = None
    for target in rules:
        if dtype is not None and casting.applies(dtype, target):
            found = target
    return found


def _under(key: str, path: str) -> bool:
    return key == path or key.startswith(path + "/") or not path


def _plan_keys(
    prefix: str,
    keys: list[str],
    renames: list[tuple[str, str]],
    drops: list[str],
    adds: dict[str, Any],
    casts: dict[str, DType],
    entries: Mapping[str, Any],
) -> list[Item]:
    """The result's tensors for a checkpoint without an object graph: every rule works on keys."""
    current = {key: key for key in keys}  # result key -> source key
    for what, path in (
        [("drop", p) for p in drops] + [("rename", p) for pair in renames for p in pair] + [("add", p) for p in adds]
    ):
        if not path:
            raise InvalidArgumentError(f"{prefix}: {what}: an empty key; name a key or a key prefix such as 'layer'")
    for path in drops:
        hit = [k for k in current if _under(k, path)]
        if not hit:
            raise NotFoundError(f"{prefix}: drop {path!r}: no key is or starts with {path + '/'!r}", path=prefix)
        for k in hit:
            del current[k]
    for old, new in renames:
        hit = [k for k in current if _under(k, old)]
        if not hit:
            raise NotFoundError(f"{prefix}: rename {old!r}: no key is or starts with {old + '/'!r}", path=prefix)
        moved = {new + k[len(old) :]: current.pop(k) for k in hit}
        _refuse_clash(prefix, f"rename {old!r} -> {new!r}", moved, current)
        current.update(moved)
    for path in adds:
        _refuse_clash(prefix, f"add {path!r}", {path: ""}, current)
    items = []
    for key, source in current.items():
        entry = entries[source]
        rules = [t for p, t in casts.items() if _under(key, p)]
        items.append(Item(key, source, cast=_cast_for(key, entry.dtype, rules), shard_id=entry.shard_id))
    for path, value in adds.items():
        rules = [t for p, t in casts.items() if _under(path, p)]
        items.append(Item(path, None, value, _cast_for(path, dtype_of(value, path), rules)))
    _check_casts(prefix, casts, items, entries, lambda item, p: _under(item.key, p))
    return items


def _refuse_clash(prefix: str, what: str, new: Mapping[str, str], existing: Mapping[str, str]) -> None:
    clash = sorted(set(new) & set(existing))
    if clash:
        raise InvalidArgumentError(
            f"{prefix}: {what}: {clash[0]!r} already exists; drop it first or choose another name", path=prefix
        )


def _plan_graph(
    prefix: str,
    graph: Any,
    keys: list[str],
    renames: list[tuple[str, str]],
    drops: list[str],
    adds: dict[str, Any],
    casts: dict[str, DType],
    entries: Mapping[str, Any],
) -> tuple[list[Item], bytes]:
    """The result's tensors and object graph for an object-based checkpoint."""
    edit = GraphEdit(graph, prefix)
    for path in drops:
        edit.drop(path)
    for old, new in renames:
        edit.move(old, new)
    for path in adds:
        edit.add(path)
    new_graph, key_map = edit.rebuild()
    # An attribute's values: the tensor under its key, and for a saveable of several tensors (a
    # lookup table's "-keys" and "-values") those under its key and a "-suffix".
    stored = sorted(k for k in keys if k != OBJECT_GRAPH_KEY)
    parts: dict[str, list[str]] = {}
    attribute_keys = {a.checkpoint_key for node in graph.nodes for a in node.attributes}
    for node in graph.nodes:
        for attr in node.attributes:
            found = [
                k
                for k in _stored_under(stored, attr.checkpoint_key)
                if k == attr.checkpoint_key or k not in attribute_keys
            ]
            if not found and attr.checkpoint_key in key_map:
                raise NotFoundError(
                    f"{prefix}: the object graph names key {attr.checkpoint_key!r}, which the checkpoint does not "
                    "hold; it is damaged (`trackpoint verify` it) or one part of a multi-device save (merge the "
                    "parts first: `trackpoint merge`)",
                    path=prefix,
                    key=attr.checkpoint_key,
                )
            parts[attr.checkpoint_key] = found
    tracked = {k for found in parts.values() for k in found}
    untracked = [k for k in keys if k not in tracked and k != OBJECT_GRAPH_KEY]
    # Each cast rule: the keys of the object it names, its descendants and their slots (result paths).
    targets = _cast_targets(prefix, new_graph, casts)
    items: list[Item] = []
    source_of = {new: old for old, new in key_map.items()}
    seen: set[str] = set(untracked)
    base_of: dict[str, str] = {}  # result key -> its attribute's key, which the cast rules name
    for node in new_graph.nodes:
        for attr in node.attributes:
            base = attr.checkpoint_key
            old_base = source_of[base]
            rules = [t for p, t in casts.items() if base in targets[p]]
            pairs: list[tuple[str, str | None]]
            if old_base.startswith("\0add:"):
                value = adds[old_base[len("\0add:") :]]
                pairs = [(base, None)]
            else:
                pairs = [(base + old[len(old_base) :], old) for old in parts[old_base]]
            for key, source in pairs:
                if key in seen:
                    raise InvalidArgumentError(
                        f"{prefix}: two values would be stored under {key!r}; rename one of them", path=prefix, key=key
                    )
                seen.add(key)
                base_of[key] = base
                if source is None:
                    items.append(Item(key, None, value, _cast_for(key, dtype_of(value, key), rules)))
                else:
                    entry = entries[source]
                    items.append(Item(key, source, cast=_cast_for(key, entry.dtype, rules), shard_id=entry.shard_id))
    for key in untracked:
        items.append(Item(key, key, shard_id=entries[key].shard_id))
    _check_casts(prefix, casts, items, entries, lambda item, p: base_of.get(item.key) in targets[p])
    return items, new_graph.SerializeToString()


def _stored_under(stored: list[str], key: str) -> list[str]:
    """The keys of ``stored`` (sorted) that are ``key`` or ``key-<suffix>``."""
    start = bisect.bisect_left(stored, key)
    found = [key] if start < len(stored) and stored[start] == key else []
    start = bisect.bisect_left(stored, key + "-")
    while start < len(stored) and stored[start].startswith(key + "-"):
        found.append(stored[start])
        start += 1
    return found


def _cast_targets(prefix: str, graph: Any, casts: Mapping[str, DType]) -> dict[str, set[str]]:
    """``{cast path: the result keys it covers}``."""
    edit = GraphEdit(graph, prefix)
    paths = tf_paths(graph)
    out: dict[str, set[str]] = {}
    for path in casts:
        node_id = edit.find(path, f"cast {path!r}")
        under = edit._reachable(node_id)  # the same walk, on a graph of its own
        under |= {
            s.slot_variable_node_id
            for n in graph.nodes
            for s in n.slot_variables
            if s.original_variable_node_id in under
        }
        out[path] = {a.checkpoint_key for i in under if i in paths for a in graph.nodes[i].attributes}
    return out


def _check_casts(
    prefix: str, casts: Mapping[str, DType], items: list[Item], entries: Mapping[str, Any], covers: Any
) -> None:
    """Refuse a cast rule that changes nothing (a typo, or a family mismatch such as ints to floats)."""
    for path, target in casts.items():
        covered = [item for item in items if covers(item, path)]
        if not any(item.cast is not None for item in covered) and not any(
            _dtype(item, entries) is not None and _dtype(item, entries) == target for item in covered
        ):
            have = sorted({d.name for d in (_dtype(i, entries) for i in covered) if d is not None})
            raise InvalidArgumentError(
                f"{prefix}: cast {path!r} to {target.name}: it covers no {casting.family(target)} tensor "
                f"(it holds {', '.join(have) or 'no tensors'}); ints and floats are never cast into each "
                "other, nor bool, complex or string tensors",
                path=prefix,
            )


def _dtype(item: Item, entries: Mapping[str, Any]) -> DType | None:
    if item.source is None:
        return dtype_of(item.value, item.key)
    dtype: DType | None = entries[item.source].dtype
    return dtype
