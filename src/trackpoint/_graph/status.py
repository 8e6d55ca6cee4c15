"""What ``restore()`` returns: TF's status assertions plus a structured, non-raising report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trackpoint._graph.coordinator import RestoreCoordinator
from trackpoint._graph.live import breadth_first, by_id
from trackpoint._graph.name_based import NameBasedRestore
from trackpoint._storage.storage import storage_for
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.slots import slot_variables

__all__ = ["CheckpointLoadStatus", "InitializationOnlyStatus", "NameBasedSaverStatus", "RestoreReport"]


@dataclass(frozen=True)
class RestoreReport:
    """A restore's account, with TF-style paths such as ``(root).model.dense.kernel``.

    Attributes:
        matched: Checkpoint paths bound to live objects.
        pending: Checkpoint paths with values not restored yet, mapped to True when they wait
            for an object to be created (restore-on-create) and False when nothing will
            receive them.
        missing_from_checkpoint: Paths of live objects with values that the checkpoint lacks.
        unused_attributes: Checkpoint path → attribute names the live object does not have.
        notes: Lines about the restore as a whole that are no problem of its values, such as
            a checkpoint read from outside the directory whose state file named it.
        split: Path of a live object → the path of the live object bound to the checkpoint
            object whose values it took: one object in the checkpoint reached under two names
            where this program holds two (a weight tied when saved, loaded untied). Each took
            the values; the assertions still fail, as TF's do, since the objects will now
            change apart.
    """

    matched: tuple[str, ...]
    pending: Mapping[str, bool]
    missing_from_checkpoint: tuple[str, ...]
    unused_attributes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    split: Mapping[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True when ``assert_consumed()`` would pass."""
        return not self.pending and not self.missing_from_checkpoint and not self.unused_attributes and not self.split


def _holds_tensors(obj: Trackable) -> bool:
    return bool(obj._checkpoint_tensor_names())


class CheckpointLoadStatus:
    """The result of restoring an object-based checkpoint (eager semantics).

    Values are assigned as soon as an object is bound, so ``run_restore_ops`` and
    ``initialize_or_restore`` do nothing. The assertions raise ``AssertionError`` as TF's do.
    """

    def __init__(
        self,
        coordinator: RestoreCoordinator,
        root: Trackable,
        attached: Mapping[str, Trackable],
        listed_by: str | None = None,
    ) -> None:
        """Account for the restore ``coordinator`` made into ``root`` and its ``attached`` dependencies.

        Args:
            coordinator: The restore.
            root: The object bound to node 0.
            attached: The dependencies attached to the root.
            listed_by: The directory whose ``checkpoint`` state file named the prefix read,
                if that is how it was found.
        """
        self._coordinator = coordinator
        self._root = root
        self._attached = attached  # live: save_counter may be attached after the restore
        # Worked out now: the links may point elsewhere by the time report() is called.
        self._notes = _source_notes(coordinator.prefix, listed_by)

    def _live_objects(self) -> tuple[list[Trackable], Callable[[int], str]]:
        """Every live object (slot variables after the rest) and a function naming the i-th.

        Slot variables are left out when the restore skipped them. Paths are only spelled out
        for the few objects a message mentions.
        """
        walk = breadth_first(self._root, self._attached)
        objects, parents, names = list(walk.nodes), walk.parents, walk.names
        count = len(objects)
        slots = [] if self._coordinator.skip_slot_variables else slot_variables(objects)
        objects.extend(slot for _, _, _, slot in slots)

        def path(index: int) -> str:
            if index >= count:
                opt_index, name, var_index, _ = slots[index - count]
                return f"{path(opt_index)}'s state '{name}' for {path(var_index)}"
            parts = []
            while index > 0:
                parts.append(names[index])
                index = parents[index]
            return ".".join(["(root)"] + parts[::-1])

        return objects, path

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Every live object with values was bound to, and received, a checkpoint value."""
        coordinator = self._coordinator
        unassigned = coordinator.first_unassigned(_holds_tensors)
        if unassigned is not None:
            raise AssertionError(f"Object {coordinator.path(unassigned)} not assigned a value from checkpoint.")
        if coordinator.coverage.binds_every_live_object(
            coordinator.bound, self._root, self._attached, coordinator.skip_slot_variables
        ):
            return self
        # The live objects less the bound ones are the unbound; paths are only worked out for
        # a message, by a second walk.
        live = _live_by_id(self._root, self._attached, not coordinator.skip_slot_variables)
        bound_ids = coordinator.bound_ids()
        if any(_holds_tensors(live[key]) for key in live.keys() - bound_ids):
            objects, path = self._live_objects()
            aliases = coordinator.alias_ids()
            unbound = [i for i, obj in enumerate(objects) if id(obj) not in bound_ids and _holds_tensors(obj)]
            unmatched = [path(i) for i in unbound if id(objects[i]) not in aliases]
            if unmatched:
                raise AssertionError(
                    f"Found {len(unmatched)} Python objects that were not bound to checkpointed values, likely due "
                    f"to changes in the Python program. Showing {min(10, len(unmatched))} of {len(unmatched)} "
                    f"unmatched objects: {unmatched[:10]}"
                )
            split = [f"{live} took {bound}" for live, bound in _split(coordinator, objects, path, unbound).items()]
            if split:
                # As TF: one checkpoint object split into two is no match, though here each took the values.
                raise AssertionError(
                    f"Found {len(split)} Python objects that took the values of a checkpoint object bound to "
                    "another Python object: the checkpoint holds one object under several names where this program "
                    "holds several (a weight tied when saved, untied here), which will now change apart. Tie them "
                    "as they were saved, or leave this assertion out (report().split lists them). "
                    f"Showing {min(10, len(split))} of {len(split)}: "
                    f"{split[:10]}"
                )
        return self

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Every checkpoint value was restored and every live object matched."""
        self.assert_existing_objects_matched()
        coordinator = self._coordinator
        for node_id in coordinator.unrestored_values():
            raise AssertionError(
                f"Unresolved object in checkpoint {coordinator.path(node_id)}: {coordinator.node_text(node_id)}".strip()
            )
        if coordinator.unresolved_slots():
            raise AssertionError(f"Unresolved slot restorations: {coordinator.unresolved_slots()}")
        unused = coordinator.unused_attribute_paths()
        if unused:
            raise AssertionError(
                f"Unused attributes in these objects (the attributes exist in the checkpoint but "
                f"were not restored): {unused}"
            )
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Something besides the root matched."""
        if len(self._coordinator.bound_objects()) <= 1:
            raise AssertionError(
                f"Nothing except the root object matched a checkpointed value from "
                f"{self._coordinator.prefix}. Typically this means the checkpoint does not match "
                "the Python program."
            )
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Silence the warning about checkpoint values that were never restored."""
        self._coordinator.silence()
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run: values are assigned eagerly."""
        del session

    def initialize_or_restore(self, session: Any = None) -> None:
        """Nothing to run: values are assigned eagerly; new variables already hold their initial values."""
        del session

    def report(self) -> RestoreReport:
        """A structured account of this restore that never raises."""
        coordinator = self._coordinator
        bound_objects = coordinator.bound_objects()
        bound = {id(o) for _, o in bound_objects}
        objects, path = self._live_objects()
        aliases = coordinator.alias_ids()
        unbound = [i for i, obj in enumerate(objects) if id(obj) not in bound and _holds_tensors(obj)]
        return RestoreReport(
            matched=tuple(coordinator.path(i) for i in sorted(node_id for node_id, _ in bound_objects)),
            pending=coordinator.pending(),
            missing_from_checkpoint=tuple(path(i) for i in unbound if id(objects[i]) not in aliases),
            unused_attributes=coordinator.unused_attribute_paths(),
            notes=self._notes,
            split=_split(coordinator, objects, path, unbound),
        )


def _split(
    coordinator: RestoreCoordinator, objects: list[Trackable], path: Callable[[int], str], unbound: list[int]
) -> dict[str, str]:
    """Path of each of the ``unbound`` live objects that took the values of a node bound to
    another object (see ``RestoreCoordinator.alias_ids``) -> the path of that object (the
    checkpoint's path of the node when that object is not among ``objects``)."""
    aliases = coordinator.alias_ids()
    split = [i for i in unbound if id(objects[i]) in aliases]
    if not split:
        return {}
    index = {id(obj): i for i, obj in enumerate(objects)}
    out = {}
    for i in split:
        node_id = aliases[id(objects[i])]
        bound = index.get(id(coordinator.bound_object(node_id)))
        out[path(i)] = path(bound) if bound is not None else coordinator.path(node_id)
    return out


def _source_notes(prefix: str, listed_by: str | None) -> tuple[str, ...]:
    """A note when the state file of ``listed_by`` named a checkpoint that, links resolved, is
    not directly in that directory (the test the CLI's note uses): its bytes came from elsewhere."""
    path = None if listed_by is None else storage_for(prefix).real_outside(listed_by, prefix)
    if path is None:
        return ()
    return (f"the checkpoint was read from {path}, outside {listed_by} whose state file named it",)


def _live_by_id(root: Trackable, attached: Mapping[str, Trackable], with_slots: bool) -> dict[int, Trackable]:
    """Every live object by id (see :func:`~trackpoint._graph.live.by_id`), slot variables too when asked."""
    live = by_id(root, attached)
    if with_slots:
        for _, _, _, slot in slot_variables(list(live.values())):
            live.setdefault(id(slot), slot)
    return live


class NameBasedSaverStatus:
    """The result of restoring a checkpoint without an object graph (TF1's ``Saver``) by name.

    Each variable took the value saved under its global name (``tp.Variable(name=...)``),
    optimizer slots those under TF1's slot names (``<var>/Adam``, ``<var>/Adam_1``,
    ``<var>/Momentum``); values no object asked for are left alone. As in TF, the checkpoint
    says nothing about objects, so the three assertions are one: every live object holding
    values found them under its name, and was reached by this restore (a slot variable
    created after it was not). Variables created later under a restored object are looked up
    by name as they are tracked (restore-on-create).

    Examples:
        ``tf1_prefix`` is a TF1 ``Saver`` checkpoint holding ``w`` = [1, 2] and ``global_step`` = 7:

        >>> import trackpoint as tp
        >>> w, step = tp.Variable([0.0, 0.0], name="w"), tp.Variable(0, dtype="int64", name="global_step")
        >>> status = tp.Checkpoint(w=w, step=step).restore(tf1_prefix)
        >>> type(status).__name__, w.numpy().tolist(), int(step.numpy())
        ('NameBasedSaverStatus', [1.0, 2.0], 7)
        >>> status.assert_consumed() is status
        True
    """

    def __init__(self, restore: NameBasedRestore, root: Trackable, attached: Mapping[str, Trackable]) -> None:
        self._restore = restore
        self._root = root
        self._attached = attached  # live: save_counter may be attached after the restore
        self._optional: list[Trackable] = []

    def add_to_optionally_restored(self, var: Trackable) -> None:
        """Leave ``var`` out of the assertions (``Checkpoint.restore`` does it for its
        ``save_counter``, which a TF1 checkpoint does not hold)."""
        self._optional.append(var)

    def assert_consumed(self) -> NameBasedSaverStatus:
        """Every live object holding values found them under its name and was restored.

        Raises:
            AssertionError: Naming the objects, the names looked up and the checkpoint.
        """
        restore = self._restore
        unused = restore.unused(self._optional)
        if unused:
            lines = "".join(f"\n    {obj!r}: {names}" for obj, names in unused[:10])
            raise AssertionError(
                f"Some objects had attributes which were not restored from the name-based checkpoint "
                f"{restore.prefix} (no value under these names; {len(unused)} objects, showing "
                f"{min(10, len(unused))}):{lines}\nName each variable as its key in the checkpoint "
                "(tp.list_variables lists them), or leave these objects out of the Checkpoint"
            )
        for obj in restore.not_restored(self._root, self._attached):
            raise AssertionError(
                f"Object not restored: {obj!r} (made after the name-based restore of {restore.prefix}, where a "
                "slot variable or an object outside the restored ones is not looked up by name)"
            )
        return self

    #: TF: a name-based checkpoint holds no objects to tell these apart from assert_consumed.
    assert_existing_objects_matched = assert_nontrivial_match = assert_consumed

    def expect_partial(self) -> NameBasedSaverStatus:
        """Nothing to silence (a name-based restore warns of no unused value); returns self."""
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run: values were assigned eagerly."""
        del session

    initialize_or_restore = run_restore_ops

    def report(self) -> RestoreReport:
        """A structured account that never raises: ``matched`` holds the keys restored,
        ``missing_from_checkpoint`` the objects that found no value under their names."""
        restore = self._restore
        missing = [f"{obj!r}: {', '.join(names)}" for obj, names in restore.unused(self._optional)]
        missing += [repr(obj) for obj in restore.not_restored(self._root, self._attached)]
        return RestoreReport(
            matched=tuple(sorted(restore.restored_keys)), pending={}, missing_from_checkpoint=tuple(missing)
        )


class InitializationOnlyStatus:
    """Returned by ``restore(None)``: there is nothing to restore, so every assertion fails."""

    def _fail(self, *args: Any) -> Any:
        raise AssertionError("No checkpoint specified (save_path=None); nothing is being restored.")

    assert_consumed = assert_existing_objects_matched = assert_nontrivial_match = run_restore_ops = _fail

    def expect_partial(self) -> InitializationOnlyStatus:
        return self

    def initialize_or_restore(self, session: Any = None) -> None:
        """Nothing to do: variables hold their initial values from creation."""
        del session

    def report(self) -> RestoreReport:
        return RestoreReport(matched=(), pending={}, missing_from_checkpoint=())
