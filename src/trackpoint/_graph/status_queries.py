"""What a restore's status asks of it: which nodes were matched, what is left, what to warn about.

:class:`RestoreQueries` is the read side of a
:class:`~trackpoint._graph.coordinator.RestoreCoordinator` (which inherits it): the status objects
(:mod:`~trackpoint._graph.status`) ask these questions, the coordinator's bookkeeping answers
them. The answers rest on the matched flags and the bookkeeping, not on the bound objects
alone, so that they do not change when restored objects are garbage-collected.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._graph.object_graph import node_paths
from trackpoint._graph.values import CheckpointValues
from trackpoint._tracking.base import Trackable

__all__ = ["RestoreQueries"]


class RestoreQueries:
    """The status's questions about one restore (mixed into ``RestoreCoordinator``, which sets these attributes)."""

    prefix: str
    values: CheckpointValues
    nodes: Any  # the graph's repeated TrackableObject messages
    graph: pb.TrackableObjectGraph
    restore_uid: int
    bound: dict[int, weakref.ref[Trackable]]
    aliases: dict[int, list[weakref.ref[Trackable]]]
    matched: np.ndarray
    unused_attributes: dict[int, list[str]]
    slot_node_ids: set[int]
    slot_restorations: dict[int, list[tuple[int, int, str]]]
    deferred_slot_restorations: dict[int, list[tuple[Trackable, int, str]]]
    deferred_ids: set[int]
    skip_slot_variables: bool
    expect_partial: bool

    def children(self, node_id: int) -> list[tuple[int, str]]:
        raise NotImplementedError  # the coordinator's, which checks each id

    @functools.cached_property
    def paths(self) -> dict[int, str]:
        """Each node's readable path (see :func:`node_paths`), worked out when a message first needs one."""
        return node_paths(self.graph)

    def bound_ids(self) -> set[int]:
        """``id()`` of every bound object still alive (no pair per binding: a restore of many
        variables would make one object each for the collector)."""
        return {id(obj) for ref in self.bound.values() if (obj := ref()) is not None}

    def alias_ids(self) -> dict[int, int]:
        """``id()`` of each live object that took a node's values under another of the node's
        names than its bound object (see ``walk._add_alias``) -> that node."""
        return {
            id(obj): node_id for node_id, refs in self.aliases.items() for ref in refs if (obj := ref()) is not None
        }

    def first_unassigned(self, holds_tensors: Callable[[Trackable], bool]) -> int | None:
        """The first node whose live object holds tensors yet took none of this restore's values
        (nor a later one's); None when there is none."""
        uid = self.restore_uid
        for node_id, ref in self.bound.items():
            obj = ref()
            if obj is not None and obj._tp_update_uid < uid and holds_tensors(obj):
                return node_id
        return None

    def path(self, node_id: int) -> str:
        """The readable path of a node, ``(root).model.dense.kernel``."""
        return self.paths[node_id]

    def node_text(self, node_id: int) -> str:
        """The node as protobuf prints it."""
        return str(self.nodes[node_id]).strip()

    def unresolved_slots(self) -> dict[int, list[tuple[int, int, str]]]:
        """Variable node id -> ``(optimizer node id, slot node id, slot name)`` of the slots whose
        variable was never bound."""
        return self.slot_restorations

    def unused_attribute_paths(self) -> dict[str, tuple[str, ...]]:
        """Path -> the attribute names its bound object does not take."""
        return {self.paths[i]: tuple(names) for i, names in self.unused_attributes.items()}

    def pending(self) -> dict[str, bool]:
        """Path -> whether it waits for an object to be created, for each value not restored yet."""
        waiting: set[int] = set()
        matched = self.matched
        for node_id in [i for i in self.deferred_ids if not matched[i]]:
            waiting.update(self._subtree(node_id))
        for opt_id, node in enumerate(self.nodes):
            for slot in node.slot_variables:
                if opt_id in waiting or slot.original_variable_node_id in waiting:
                    waiting.add(slot.slot_variable_node_id)
        for entries in self.deferred_slot_restorations.values():
            waiting.update(slot_id for _, slot_id, _ in entries)
        return {self.paths[node_id]: node_id in waiting for node_id in self.unrestored_values()}

    def _subtree(self, node_id: int) -> set[int]:
        seen = {node_id}
        todo = [node_id]
        while todo:
            for child_id, _ in self.children(todo.pop()):
                if child_id not in seen:
                    seen.add(child_id)
                    todo.append(child_id)
        return seen

    def silence(self) -> None:
        """No warning about unrestored values when this restore goes (``expect_partial``)."""
        self.expect_partial = True

    def keep_waiting_values(self) -> None:
        """Read into memory every value no object has taken yet (see :mod:`kept_values`)."""
        self.values.keep(
            [a.checkpoint_key for node_id in self.unrestored_values() for a in self.nodes[node_id].attributes]
        )

    def unrestored_values(self) -> list[int]:
        """Checkpoint nodes holding values that no live object has received."""
        # The matched flags, not the bound objects: the answer must not change when the
        # restored objects are garbage-collected (e.g. at interpreter exit). Only unmatched
        # nodes are looked at: after a complete restore, none.
        skipped = self.slot_node_ids if self.skip_slot_variables else ()
        nodes = self.nodes
        unmatched = np.flatnonzero(~self.matched).tolist()
        return [i for i in unmatched if i not in skipped and nodes[i].attributes]

    def partial_restore_warning(self) -> str | None:
        """What TF warns about when a restore is deleted before all its values found a home.

        Two kinds, as in TF: checkpoint nodes with values that no object was bound to, and
        attributes of bound nodes that their object does not take (a variable's value
        restored into an object without tensors). None when there is neither.
        """
        missing = self.unrestored_values()
        unused = list(self.unused_attributes.items())
        if not missing and not unused:
            return None
        paths = self.paths
        lines = [
            (
                f"{self.prefix}: a restore is being deleted with unrestored values. Call expect_partial() on the "
                "restore status to silence this warning."
            )
        ]
        _list_some(
            lines,
            f"{len(missing)} checkpoint value(s) were never restored (no object matched them):",
            [paths[i] for i in missing[:10]],
            len(missing),
        )
        _list_some(
            lines,
            f"{len(unused)} restored object(s) did not take attribute(s) the checkpoint holds for them:",
            [f"{paths[i]}: {', '.join(names)}" for i, names in unused[:10]],
            len(unused),
        )
        return "\n".join(lines)

    def __del__(self) -> None:
        if self.expect_partial:
            return
        try:
            message = self.partial_restore_warning()
        except Exception:  # noqa: BLE001 - at interpreter exit, modules may be half torn down
            return
        if message is not None:
            warnings.warn(message, UserWarning, stacklevel=2)


def _list_some(lines: list[str], heading: str, shown: list[str], total: int) -> None:
    """Append ``heading`` and the first items, indented, with a count of the rest (nothing when ``total`` is 0)."""
    if total:
        lines.append(heading)
        lines.extend(f"  {item}" for item in shown)
        if total > len(shown):
            lines.append(f"  ... and {total - len(shown)} more")
