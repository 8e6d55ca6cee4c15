"""``tp.CheckpointView``: look inside an object-based checkpoint without restoring it.

Examples:
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

import os
import warnings
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, overload

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.state_file import resolve_prefix
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint._graph.object_graph import node_paths, read_object_graph, tree_paths
from trackpoint._storage.storage_options import use_storage_options
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import VARIABLE_VALUE
from trackpoint._view_diff import (
    CheckpointDiff,
    ObjectDiff,
    ValueChange,
    check_tolerances,
    diff_checkpoints,
    diff_objects,
)
from trackpoint._view_render import describe, render_tree
from trackpoint.errors import InvalidArgumentError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = ["CheckpointDiff", "CheckpointView", "ValueChange"]


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

    Examples:
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

    def values_below(self, node_id: int, skip: Collection[str] = ()) -> dict[int, str]:
        """``{node id: VARIABLE_VALUE key}`` of every node below ``node_id`` that holds a variable's
        value, leaving out the children of ``node_id`` named in ``skip`` (and what only they reach).

        Examples:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> path = tp.Checkpoint(w=tp.Variable(1.0)).write(tempfile.mkdtemp() + "/ckpt")
            >>> with tp.CheckpointView(path) as view:
            ...     sorted(view.values_below(0, skip={"save_counter"}).values())
            ['w/.ATTRIBUTES/VARIABLE_VALUE']
        """
        out: dict[int, str] = {}
        seen = {node_id}
        stack = [child for name, child in self.children(node_id).items() if name not in skip]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            key = self.attributes(node).get(VARIABLE_VALUE)
            if key is not None:
                out[node] = key
            stack.extend(self.children(node).values())
        return out

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

        Examples:
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
    ) -> ObjectDiff: ...

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
    ) -> ObjectDiff | CheckpointDiff:
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

        Examples:
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
            return diff_objects(self.match(obj), self.descendants(), obj)
        check_tolerances(rtol, atol)
        if isinstance(obj, CheckpointView):
            return self._diff_checkpoints(obj, rtol, atol, progress)
        with CheckpointView(os.fspath(obj), storage_options=storage_options) as other:
            return self._diff_checkpoints(other, rtol, atol, progress)

    def _diff_checkpoints(
        self, other: CheckpointView, rtol: float, atol: float, progress: Callable[[int, int], None] | None
    ) -> CheckpointDiff:
        return diff_checkpoints(self._values(), self._reader, other._values(), other._reader, rtol, atol, progress)

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

        Examples:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> path = tp.Checkpoint(w=tp.Variable([[1.0, 2.0]])).write(tempfile.mkdtemp() + "/ckpt")
            >>> with tp.CheckpointView(path) as view:
            ...     view.describe(view.attributes(1)["VARIABLE_VALUE"])
            ('float32', [1, 2], 8)
        """
        return describe(self._reader, key)

    def tree(self) -> str:
        """The graph as an indented tree: each object with its values' dtype, shape and bytes,
        slot variables under the variable they belong to."""
        return render_tree(self._graph, self._paths, self._reader)
