"""``tp.CheckpointView``: look inside an object-based checkpoint without restoring it.

Example:
    >>> import tempfile
    >>> import trackpoint as tp
    >>> root = tp.Module()
    >>> root.w = tp.Variable([1.0, 2.0])
    >>> path = tp.Checkpoint(root).save(tempfile.mkdtemp() + "/ckpt")
    >>> view = tp.CheckpointView(path)
    >>> view.children(0)
    {'w': 1, 'root': 0, 'save_counter': 2}
    >>> print(view.tree())
    (root)
      w  float32[2]  8 B
      save_counter  int64[]  8 B
"""

from __future__ import annotations

import math
import os
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.state_file import resolve_prefix
from trackpoint._format.text import printable
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint._graph.object_graph import node_paths, read_object_graph, tree_paths
from trackpoint._storage.storage_options import use_storage_options
from trackpoint._tracking.base import Trackable
from trackpoint.errors import InvalidArgumentError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = ["CheckpointDiff", "CheckpointView", "ValueChange"]


@dataclass(frozen=True)
class ValueChange:
    """One difference between two checkpoints' values at the same path.

    Attributes:
        path: The object path, e.g. ``(root).model.kernel`` (slots as ``... 's state 'm' for ...``).
        attribute: The attribute name, usually ``VARIABLE_VALUE``.
        kind: ``"dtype"``, ``"shape"`` or ``"value"``.
        detail: Human-readable before → after.
        max_abs_diff: For ``"value"`` changes of numbers, the largest absolute difference.

    Example:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> root = tp.Module()
        >>> root.w = tp.Variable([1.0, 2.0])
        >>> directory = tempfile.mkdtemp()
        >>> before = tp.Checkpoint(root).write(directory + "/before")
        >>> _ = root.w.assign([1.0, 2.5])
        >>> with tp.CheckpointView(before) as view:
        ...     (change,) = view.diff(tp.Checkpoint(root).write(directory + "/after")).changed
        >>> change
        ValueChange(path='(root).w', attribute='VARIABLE_VALUE', kind='value',
                    detail='1 of 2 elements differ', max_abs_diff=0.5)
    """

    path: str
    attribute: str
    kind: str
    detail: str
    max_abs_diff: float | None = None


@dataclass(frozen=True)
class CheckpointDiff:
    """The node-by-node comparison of two checkpoints (``CheckpointView.diff(other)``).

    Attributes:
        added: Object paths holding values only in the other checkpoint.
        removed: Object paths holding values only in this checkpoint.
        changed: Differences in dtype, shape or value at paths both hold, largest first.

    Example:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> root = tp.Module()
        >>> root.w = tp.Variable([1.0, 2.0])
        >>> directory = tempfile.mkdtemp()
        >>> before = tp.Checkpoint(root).write(directory + "/before")
        >>> root.b = tp.Variable(0.0)
        >>> after = tp.Checkpoint(root).write(directory + "/after")
        >>> with tp.CheckpointView(before) as view:
        ...     result = view.diff(after)
        >>> result.equal, result.added, result.removed, result.changed
        (False, ('(root).b',), (), ())
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[ValueChange, ...] = field(default_factory=tuple)

    @property
    def equal(self) -> bool:
        """True when nothing was added, removed or changed."""
        return not (self.added or self.removed or self.changed)


_ObjectDiff = tuple[dict[int, Trackable], list[int], list[Trackable]]
"""TF's ``CheckpointView.diff(obj)``: matched nodes, nodes only in the checkpoint, objects only in ``obj``."""


class CheckpointView:
    """The object graph of a checkpoint, as TF's ``tf.train.CheckpointView`` gives it.

    It keeps the checkpoint's index in memory and opens data files as values are read;
    :meth:`close` (or a ``with`` block) closes them. A closed view still answers every
    question about the graph (:meth:`children`, :meth:`tree`, ...), but cannot read values.

    Args:
        save_path: A checkpoint prefix, or a directory with a ``checkpoint`` state file (a local
            path or an fsspec URL).
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept for every URL under its parent (``s3://bucket/run`` for
            ``s3://bucket/run/ckpt-1``; never above the bucket), as ``tp.set_storage_options``
            keeps them for a prefix, so values read later use them too. The latest given for a
            prefix replace earlier ones. Local paths take none.

    Raises:
        NotFoundError: Nothing is there.
        InvalidArgumentError: The checkpoint has no object graph (a name-based or plain bundle),
            or bad ``storage_options`` (not a mapping with ``str`` keys, or for a local path).

    Example:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> model = tp.Module()
        >>> model.dense = tp.Module()
        >>> model.dense.kernel = tp.Variable([[1.0, 2.0]])
        >>> path = tp.Checkpoint(model=model).write(tempfile.mkdtemp() + "/ckpt")
        >>> with tp.CheckpointView(path) as view:
        ...     print(view.paths()[3])
        ...     print(view.tree())
        (root).model.dense.kernel
        (root)
          model
            dense
              kernel  float32[1,2]  8 B
    """

    def __init__(self, save_path: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
        use_storage_options(save_path, storage_options)
        prefix = resolve_prefix(save_path)
        self._reader = BundleReader(prefix)
        self._prefix = prefix
        try:
            graph = read_object_graph(self._reader)
        except BaseException:
            self._reader.close()  # now, not whenever the traceback that holds this view is dropped
            raise
        if graph is None:
            self._reader.close()
            raise InvalidArgumentError(
                f'The specified checkpoint "{prefix}" does not appear to be object-based (saved with TF2) since it '
                f"is missing the key {OBJECT_GRAPH_KEY!r}. Inspect its tensors with tp.load_checkpoint() instead."
            )
        self._graph = graph
        self._paths = node_paths(self._graph)

    @property
    def prefix(self) -> str:
        """The checkpoint prefix the view reads (a directory given resolved to its latest)."""
        return self._prefix

    def close(self) -> None:
        """Close the checkpoint's data files (also done when the view is garbage-collected)."""
        self._reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def object_graph(self) -> pb.TrackableObjectGraph:
        """The parsed ``TrackableObjectGraph`` message."""
        return self._graph

    # -- TF's API -----------------------------------------------------------------------

    def children(self, node_id: int) -> dict[str, int]:
        """``{local_name: node_id}`` of a node's children, in checkpoint order."""
        if not 0 <= node_id < len(self._graph.nodes):
            raise InvalidArgumentError(f"{self._prefix}: no node {node_id} (the graph has {len(self._graph.nodes)})")
        return {child.local_name: child.node_id for child in self._graph.nodes[node_id].children}

    def descendants(self) -> list[int]:
        """Node ids reachable from the root, breadth first, root first (slot nodes excluded)."""
        found = {0}
        order = [0]
        for node_id in order:  # grows as it goes: a breadth-first walk
            for child in self._graph.nodes[node_id].children:
                if child.node_id not in found:
                    found.add(child.node_id)
                    order.append(child.node_id)
        return order

    def _descendants_with_paths(self) -> dict[int, str]:
        """``{node id: "root.a.b"}`` along the first path found breadth first (TF's private method of
        the same name, which TF's tests call; :meth:`paths` gives the readable ``(root).a.b``)."""
        return tree_paths(self._graph, "root")

    def match(self, obj: Trackable) -> dict[int, Trackable]:
        """Map checkpoint node ids to ``obj``'s objects by local names along the edges.

        A node reached along two paths (the checkpoint's graph is a DAG, not a tree) keeps
        the object found first; when the other path leads to a different live object, a
        ``UserWarning`` names both, as TF logs "Inconsistent references when matching the
        checkpoint into this object graph": a restore would give the node's values to one
        of them only.

        Example:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> root = tp.Module()
            >>> root.w = tp.Variable(1.0)
            >>> view = tp.CheckpointView(tp.Checkpoint(root).write(tempfile.mkdtemp() + "/ckpt"))
            >>> sorted(view.match(root))
            [0, 1]
        """
        matched: dict[int, Trackable] = {0: obj}
        visited: set[int] = set()
        queue = deque([(0, obj)])
        while queue:
            node_id, trackable = queue.popleft()
            live = trackable._trackable_children()
            for name, child_id in self.children(node_id).items():
                if child_id in visited or child_id == 0 or name not in live:
                    continue
                current = matched.get(child_id)
                if current is None:
                    matched[child_id] = live[name]
                    queue.append((child_id, live[name]))
                elif current is not live[name]:
                    warnings.warn(
                        f"{self._prefix}: Inconsistent references when matching the checkpoint into this object "
                        f"graph. The referenced objects are: ({current!r} and {live[name]!r}). Checkpoint node "
                        f"{self._paths.get(child_id, child_id)} is also reached as "
                        f"{self._paths.get(node_id, node_id)}.{name}, which leads to the second; the match keeps "
                        "the first. Make both paths lead to one object to restore it in both places.",
                        UserWarning,
                        stacklevel=2,
                    )
            visited.add(node_id)
        return matched

    @overload
    def diff(
        self,
        obj: Trackable,
        rtol: float = ...,
        atol: float = ...,
        progress: Callable[[int, int], None] | None = ...,
        *,
        storage_options: Mapping[str, Any] | None = ...,
    ) -> _ObjectDiff: ...

    @overload
    def diff(
        self,
        obj: CheckpointView | str | os.PathLike[str],
        rtol: float = ...,
        atol: float = ...,
        progress: Callable[[int, int], None] | None = ...,
        *,
        storage_options: Mapping[str, Any] | None = ...,
    ) -> CheckpointDiff: ...

    def diff(
        self,
        obj: Trackable | CheckpointView | str | os.PathLike[str],
        rtol: float = 0.0,
        atol: float = 0.0,
        progress: Callable[[int, int], None] | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> _ObjectDiff | CheckpointDiff:
        """Compare with a live object (TF's result) or with another checkpoint (ours).

        With a trackable, returns TF's triple ``(match(obj), node ids only in the checkpoint,
        objects only in obj)``. With a :class:`CheckpointView` or a path, returns a
        :class:`CheckpointDiff` of structure, dtypes, shapes and values (``rtol``/``atol``
        as in ``numpy.isclose``), slot variables included; ``progress(done, total)`` is
        called after each value compared. A checkpoint given by its path is closed again
        before this returns; ``storage_options`` are for that path (used for nothing else),
        as for :class:`CheckpointView` itself.

        Raises:
            InvalidArgumentError: ``rtol`` or ``atol`` is negative, infinite or NaN.

        Example:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> root = tp.Module()
            >>> root.w = tp.Variable(1.0)
            >>> path = tp.Checkpoint(root).write(tempfile.mkdtemp() + "/ckpt")
            >>> root.b = tp.Variable(2.0)
            >>> with tp.CheckpointView(path) as view:
            ...     matched, only_in_checkpoint, only_in_root = view.diff(root)
            ...     print(sorted(matched), only_in_checkpoint, only_in_root == [root.b])
            ...     print(view.diff(path).equal)
            [0, 1] [] True
            True
        """
        if isinstance(obj, Trackable):
            return self._diff_objects(obj)
        for name, tolerance in (("rtol", rtol), ("atol", atol)):
            # numpy.isclose only warns about these, then calls every value close.
            if not (math.isfinite(tolerance) and tolerance >= 0):
                raise InvalidArgumentError(f"diff: {name}={tolerance!r} is not a tolerance; give a finite number >= 0")
        if isinstance(obj, CheckpointView):
            return self._diff_checkpoints(obj, rtol, atol, progress)
        with CheckpointView(os.fspath(obj), storage_options=storage_options) as other:
            return self._diff_checkpoints(other, rtol, atol, progress)

    def _diff_objects(self, obj: Trackable) -> _ObjectDiff:
        matched = self.match(obj)
        only_in_checkpoint = [i for i in self.descendants() if i not in matched]
        matched_ids = {id(t) for t in matched.values()}
        only_in_trackable = [t for t in _live_descendants(obj) if id(t) not in matched_ids]
        return matched, only_in_checkpoint, only_in_trackable

    # -- beyond TF ----------------------------------------------------------------------

    def paths(self) -> dict[int, str]:
        """Every node's readable path: ``(root).model.kernel``; slots ``<opt>'s state 'm' for <var>``."""
        return dict(self._paths)

    def attributes(self, node_id: int) -> dict[str, str]:
        """``{attribute name: checkpoint key}`` of a node."""
        return {a.name: a.checkpoint_key for a in self._graph.nodes[node_id].attributes}

    def key_paths(self) -> dict[str, str]:
        """``{checkpoint key: object path}`` for every value the graph describes."""
        return {a.checkpoint_key: self._paths[i] for i, n in enumerate(self._graph.nodes) for a in n.attributes}

    def _values(self) -> dict[tuple[str, str], str]:
        return {
            (self._paths[i], a.name): a.checkpoint_key for i, n in enumerate(self._graph.nodes) for a in n.attributes
        }

    def describe(self, key: str) -> tuple[str, list[int], int]:
        """The dtype name, shape and size in bytes of the value at ``key``, from the index alone.

        Raises:
            NotFoundError: The checkpoint has no such key.

        Example:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> path = tp.Checkpoint(w=tp.Variable([[1.0, 2.0]])).write(tempfile.mkdtemp() + "/ckpt")
            >>> with tp.CheckpointView(path) as view:
            ...     view.describe(view.attributes(1)["VARIABLE_VALUE"])
            ('float32', [1, 2], 8)
        """
        entry = self._reader.entry(key)
        name = entry.dtype.name if entry.dtype is not None else f"dtype{entry.dtype_enum}"
        size = entry.size
        if entry.is_sliced and entry.dtype is not None and not entry.dtype.is_string:
            size = math.prod(entry.shape) * entry.dtype.numpy.itemsize
        return name, list(entry.shape), size

    def tree(self) -> str:
        """The graph as an indented tree: each object with its values' dtype, shape and bytes,
        slot variables under the variable they belong to."""
        graph = self._graph
        slots: dict[int, list[tuple[str, int, int]]] = {}
        for opt_id, node in enumerate(graph.nodes):
            for ref in node.slot_variables:
                slots.setdefault(ref.original_variable_node_id, []).append(
                    (ref.slot_name, opt_id, ref.slot_variable_node_id)
                )
        lines: list[str] = []
        seen: set[int] = set()

        def values(node_id: int) -> str:
            parts = []
            for attribute in graph.nodes[node_id].attributes:
                if attribute.checkpoint_key == "" or attribute.checkpoint_key not in self._reader:
                    parts.append(f"{attribute.name}: missing")
                    continue
                dtype, shape, size = self.describe(attribute.checkpoint_key)
                label = "" if attribute.name == "VARIABLE_VALUE" else f"{attribute.name}="
                parts.append(f"{label}{dtype}{shape}  {_bytes(size)}".replace(", ", ","))
            return "  " + "  ".join(parts) if parts else ""

        # Depth first with an explicit stack: a hostile graph may be a chain of any depth.
        stack: list[tuple[int, str, int]] = [(0, "(root)", 0)]
        while stack:
            node_id, name, depth = stack.pop()
            if node_id in seen:
                if node_id != 0:
                    lines.append(_indent(depth) + f"{name} -> {self._paths[node_id]}")
                continue
            seen.add(node_id)
            lines.append(_indent(depth) + name + values(node_id))
            for slot_name, opt_id, slot_id in slots.get(node_id, ()):
                owner = self._paths.get(opt_id, f"node {opt_id}").removeprefix("(root).")
                lines.append(_indent(depth + 1) + f"[slot {slot_name!r} of {owner}]" + values(slot_id))
            for child in reversed(graph.nodes[node_id].children):
                stack.append((child.node_id, child.local_name, depth + 1))
        # One line per object, whatever its name holds (a line break, a terminal escape).
        return "\n".join(printable(line) for line in lines)

    def _diff_checkpoints(
        self, other: CheckpointView, rtol: float, atol: float, progress: Callable[[int, int], None] | None
    ) -> CheckpointDiff:
        mine, theirs = self._values(), other._values()
        removed = sorted({path for path, _ in mine} - {path for path, _ in theirs})
        added = sorted({path for path, _ in theirs} - {path for path, _ in mine})
        changed: list[ValueChange] = []
        for done, ((path, attribute), key) in enumerate(mine.items(), 1):
            if progress is not None:
                progress(done, len(mine))
            other_key = theirs.get((path, attribute))
            if other_key is None:
                if path not in removed:
                    changed.append(ValueChange(path, attribute, "value", "attribute only in the first checkpoint"))
                continue
            change = _compare(path, attribute, self._reader, key, other._reader, other_key, rtol, atol)
            if change is not None:
                changed.append(change)
        for path, attribute in theirs.keys() - mine.keys():
            if path not in added:
                changed.append(ValueChange(path, attribute, "value", "attribute only in the second checkpoint"))
        changed.sort(key=lambda c: (-(c.max_abs_diff if c.max_abs_diff is not None else math.inf), c.path))
        return CheckpointDiff(tuple(added), tuple(removed), tuple(changed))


def _indent(depth: int) -> str:
    """Two spaces a level, capped so that a hostile, very deep graph cannot blow up the text."""
    return "  " * depth if depth <= 40 else "  " * 40 + f"[depth {depth}] "


def _bytes(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return f"{size} B"


def _compare(
    path: str,
    attribute: str,
    a_reader: BundleReader,
    a_key: str,
    b_reader: BundleReader,
    b_key: str,
    rtol: float,
    atol: float,
) -> ValueChange | None:
    a_entry, b_entry = a_reader.entry(a_key), b_reader.entry(b_key)
    if a_entry.dtype_enum != b_entry.dtype_enum:
        a_name = a_entry.dtype.name if a_entry.dtype else a_entry.dtype_enum
        b_name = b_entry.dtype.name if b_entry.dtype else b_entry.dtype_enum
        return ValueChange(path, attribute, "dtype", f"{a_name} -> {b_name}")
    if a_entry.shape != b_entry.shape:
        return ValueChange(path, attribute, "shape", f"{list(a_entry.shape)} -> {list(b_entry.shape)}")
    a, b = a_reader.read(a_key), b_reader.read(b_key)
    if isinstance(a, bytes) or np.asarray(a).dtype == object:
        if np.asarray(a, dtype=object).tolist() != np.asarray(b, dtype=object).tolist():
            return ValueChange(path, attribute, "value", "strings differ")
        return None
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if a_arr.dtype.kind in "fcV":  # V: ml_dtypes' bfloat16 and float8
        wide = np.complex128 if a_arr.dtype.kind == "c" else np.float64
        x, y = a_arr.astype(wide), b_arr.astype(wide)
        close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    else:
        x, y = a_arr.astype(np.float64), b_arr.astype(np.float64)
        close = (a_arr == b_arr) if (rtol == 0 and atol == 0) else np.isclose(x, y, rtol=rtol, atol=atol)
    if bool(np.all(close)):
        return None
    diff = np.abs(x - y)
    worst = float(np.nanmax(np.where(close, 0, diff))) if diff.size else 0.0
    count = int(np.size(close) - np.count_nonzero(close))
    return ValueChange(path, attribute, "value", f"{count} of {np.size(close)} elements differ", worst)


def _live_descendants(obj: Trackable) -> list[Trackable]:
    order = [obj]
    seen = {id(obj)}
    queue = deque([obj])
    while queue:
        for child in queue.popleft()._trackable_children().values():
            if id(child) not in seen:
                seen.add(id(child))
                order.append(child)
                queue.append(child)
    return order
