"""Surgery on a TF checkpoint: rename or move objects, drop values or optimizer slots, add variables, cast.

The result is a checkpoint TensorFlow restores into the correspondingly changed objects: its
object graph is laid out as TF would save them (see :mod:`._graph_edit`), every attribute's
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
   slots; see :mod:`._casting` for which casts are allowed.

A checkpoint without an object graph (TF1 ``Saver``) has no objects: there every path is a
key, and a rule for ``a/b`` also applies to the keys below it (``a/b/...``).

Examples:
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackpoint._io import (
    OBJECT_GRAPH_KEY,
    BundleReader,
    DType,
    dtype_of,
    encode_key,
    read_object_graph,
    resolve_prefix,
    slice_keys,
    use_storage_options_for_urls,
)
from trackpoint.errors import InvalidArgumentError, NotFoundError
from trackpoint.tools import _casting
from trackpoint.tools._graph_edit import GraphEdit
from trackpoint.tools._key_rules import cast_for, check_casts, plan_keys
from trackpoint.tools._object_paths import tf_paths
from trackpoint.tools._tensor_copy import Item, check_prefix, write_items

__all__ = ["Step", "plan_rewrite", "rewrite", "source_prefix"]


def rewrite(
    src: str,
    dst: str,
    rename: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    drop: Iterable[str] = (),
    add: Mapping[str, Any] | None = None,
    cast: Mapping[str, Any] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
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
        storage_options: Options of the fsspec filesystem (``endpoint_url``, ``key``, ``secret``...)
            for ``src`` and ``dst`` that are URLs (local ones are skipped), kept for every URL under
            each one's parent (never above the bucket), as ``tp.set_storage_options`` keeps them.

    Returns:
        ``dst``.

    Raises:
        NotFoundError: A rule names a path that does not exist.
        InvalidArgumentError: A rule is malformed, conflicts with an existing name, moves an
            object into its own subtree, or casts a value it would lose; or ``dst`` is a directory;
            or ``storage_options`` are not a mapping with ``str`` keys, or come with two local paths.
        DataLossError: A tensor of ``src`` is damaged.
        WriteError: ``dst`` cannot be written (a parent is a file, no permission, disk full).

    Examples:
        >>> import numpy as np, os, tempfile
        >>> import trackpoint as tp
        >>> d = tempfile.mkdtemp()
        >>> src = tp.save_tensors(os.path.join(d, "v1"), {"a/w": np.ones(2), "b": np.zeros(1)})
        >>> out = rewrite(src, os.path.join(d, "v2"), rename={"a": "enc"}, drop=["b"])
        >>> tp.list_variables(out)
        [('enc/w', [2])]
    """
    use_storage_options_for_urls([src, dst], storage_options)
    rules = _Rules.of(src, rename, drop, add, cast)
    dst = os.fspath(dst)
    check_prefix(dst, "rewrite")
    if os.path.realpath(dst) == os.path.realpath(rules.prefix):
        raise InvalidArgumentError(
            f"rewrite: the destination {dst!r} is the source checkpoint; write to a new prefix", path=dst
        )
    with BundleReader(rules.prefix) as bundle:
        items, graph_bytes = rules.plan(bundle)
        write_items(bundle, dst, items, graph_bytes)
    return dst


@dataclass(frozen=True)
class Step:
    """One tensor of a rewrite's result, as :func:`plan_rewrite` lists it.

    Attributes:
        source: The source key it is copied from; None for an added variable.
        key: Its key in the result.
        cast: The dtype it is cast to (``"bfloat16"``), or None when it keeps its own.
    """

    source: str | None
    key: str
    cast: str | None


def plan_rewrite(
    src: str,
    rename: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    drop: Iterable[str] = (),
    add: Mapping[str, Any] | None = None,
    cast: Mapping[str, Any] | None = None,
) -> list[Step]:
    """What :func:`rewrite` with these rules would write, checked the same way, without writing.

    A source key no step names is dropped. The object graph is left out of the list.

    Examples:
        >>> import numpy as np, os, tempfile
        >>> import trackpoint as tp
        >>> src = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "c"), {"a/w": np.ones(2), "b": np.ones(1)})
        >>> plan_rewrite(src, rename={"a": "enc"}, drop=["b"], cast={"enc": "float16"})
        [Step(source='a/w', key='enc/w', cast='float16')]
    """
    rules = _Rules.of(src, rename, drop, add, cast)
    with BundleReader(rules.prefix) as bundle:
        items, _ = rules.plan(bundle)
    return [Step(i.source, i.key, None if i.cast is None else i.cast.name) for i in items]


@dataclass(frozen=True)
class _Rules:
    """A rewrite's rules, each checked for its form; :meth:`plan` checks them against a checkpoint."""

    prefix: str
    renames: list[tuple[str, str]]
    drops: list[str]
    adds: dict[str, Any]
    casts: dict[str, DType]

    @staticmethod
    def of(src: str, rename: Any, drop: Any, add: Any, cast: Any) -> _Rules:
        adds = dict(add or {})
        for path, value in adds.items():
            _check_value(path, value)
        casts = {path: _casting.target_dtype(spec, f"{path}={spec}") for path, spec in dict(cast or {}).items()}
        return _Rules(source_prefix(src), _pairs(rename), _strings(drop, "drop"), adds, casts)

    def plan(self, bundle: BundleReader) -> tuple[list[Item], bytes | None]:
        """The result's tensors in write order, and its serialized object graph (None without one)."""
        listed = bundle.entries()
        entries = {e.key: e for e in listed}
        hidden = slice_keys(listed)  # the reader's: the keys TF lists are the keys a rewrite keeps
        visible = [e.key for e in listed if encode_key(e.key) not in hidden]
        graph = read_object_graph(bundle)
        args = (visible, self.renames, self.drops, self.adds, self.casts, entries)
        if graph is None:
            return plan_keys(self.prefix, *args), None
        return _plan_graph(self.prefix, graph, *args)


def source_prefix(src: str) -> str:
    """The prefix of the checkpoint ``src`` names: its ``.index`` file's prefix, itself when
    ``src.index`` exists (even a prefix ending in ``/``, as ``Saver.save(sess, "model/")`` writes
    ``model/.index``), else through a directory's ``checkpoint`` state file."""
    path = os.fspath(src)
    if isinstance(path, str) and path.endswith(".index") and os.path.isfile(path):
        return path[: -len(".index")]
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


_ADDED = "\0add:"  # the old key GraphEdit.rebuild gives an added variable's attribute


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
    parts = _attribute_parts(prefix, graph, keys, key_map)
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
            rules = [t for p, t in casts.items() if base in targets[p]]
            for key, source in _attribute_pairs(base, source_of[base], parts):
                if key in seen:
                    raise InvalidArgumentError(
                        f"{prefix}: two values would be stored under {key!r}; rename one of them", path=prefix, key=key
                    )
                seen.add(key)
                base_of[key] = base
                items.append(_item(key, source, adds, entries, rules))
    for key in untracked:
        items.append(Item(key, key, shard_id=entries[key].shard_id))
    check_casts(prefix, casts, items, entries, lambda item, p: base_of.get(item.key) in targets[p])
    return items, new_graph.SerializeToString()


def _attribute_parts(prefix: str, graph: Any, keys: list[str], key_map: Mapping[str, str]) -> dict[str, list[str]]:
    """``{attribute's key: the stored keys of its values}``: the tensor under its key, and for a saveable of
    several tensors (a lookup table's "-keys" and "-values") those under its key and a "-suffix".

    Raises:
        NotFoundError: The graph names a key the checkpoint lacks, of an attribute the result keeps.
    """
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
    return parts


def _attribute_pairs(base: str, old_base: str, parts: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """``(result key, source)`` of the values of the result's attribute ``base``: ``old_base`` in the
    source, or an added value's mark (``"\\0add:<path>"``, its own source)."""
    if old_base.startswith(_ADDED):
        return [(base, old_base)]
    return [(base + old[len(old_base) :], old) for old in parts[old_base]]


def _item(key: str, source: str, adds: Mapping[str, Any], entries: Mapping[str, Any], rules: list[DType]) -> Item:
    """The result's value ``key``: a stored tensor ``source`` or an added value, cast by ``rules``."""
    if source.startswith(_ADDED):
        value = adds[source[len(_ADDED) :]]
        return Item(key, None, value, cast_for(key, dtype_of(value, key), rules))
    entry = entries[source]
    return Item(key, source, cast=cast_for(key, entry.dtype, rules), shard_id=entry.shard_id)


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
    paths = tf_paths(graph, prefix)
    out: dict[str, set[str]] = {}
    for path in casts:
        node_id = edit.find(path, f"cast {path!r}")
        under = edit.reachable(node_id)
        under |= {
            s.slot_variable_node_id
            for n in graph.nodes
            for s in n.slot_variables
            if s.original_variable_node_id in under
        }
        out[path] = {a.checkpoint_key for i in under if i in paths for a in graph.nodes[i].attributes}
    return out
