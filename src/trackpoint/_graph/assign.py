"""All or nothing: a restore's values read, checked by every object, then handed out, large ones in place.

The objects are reached only through the extension protocol (:mod:`trackpoint.protocol`):
value owners (``ValueOwner``: ``tp.Variable`` and its kind) and tensor owners
(``TensorOwner``: the framework adapters) check every value before any takes one; other
objects check theirs themselves, in ``_restore_from_tensors``, and take them after that, in walk
order (as TF restores Python state first), so that one refusing leaves every owner as it was.

The in-place path: a large value whose object offers memory for it (``_tp_destination``,
``_tp_destinations``) is only verified in its file while the others are read, and read into
that memory by :func:`copy_in_place` once every value was checked and taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from trackpoint._format.entries import Entry
from trackpoint._format.in_place import InPlace, fits
from trackpoint._graph.plan import Assignment, Wanted
from trackpoint._graph.values import CheckpointValues
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.protocol import VARIABLE_VALUE, Region, TensorOwner, ValueOwner
from trackpoint._tracking.shortcuts import is_tensor_owner_class
from trackpoint.errors import InvalidArgumentError

__all__ = ["InPlaceWork", "assign", "copy_in_place"]

#: What a restore reads in place, each such row's value owner, and each such row's tensor-owner memory.
InPlaceWork = tuple[InPlace, dict[int, ValueOwner], dict[int, np.ndarray]]
#: Builds the error for a refused value: (node id, what it wanted, the object's error).
Refused = Callable[[int, Wanted, Exception], InvalidArgumentError]
#: (node id, object, wanted, tensor name -> value).
_Read = tuple[int, Trackable, Wanted, dict[str, Any]]


def _by_value(trackable: Trackable, wanted: Wanted) -> bool:
    """Whether ``trackable`` takes this value alone, by ``_tp_check_value`` (see ``protocol.ValueOwner``)."""
    return isinstance(wanted, str) or (type(trackable)._tp_takes_value and len(wanted) == 1)


def assign(
    values: CheckpointValues,
    assignments: list[Assignment],
    refused: Refused,
    before_take: Callable[[], None] | None = None,
) -> list[InPlaceWork]:
    """Read the values of gathered nodes, check each against its object, then hand them out.

    No object takes a value before all are read and every value owner's value was checked
    (each as it arrives, while the next batch is read). The values of one restore are
    therefore in memory together, beside the values they replace, as in TF (which reads them
    in one op). Tensor owners check theirs next, all before any takes one; then other objects
    check and take theirs (see the module docstring).

    ``before_take`` is called once every value is read, before any object checks or takes
    one: its exception leaves every object as it was.

    Returns:
        The values to read in place once this returns (see :func:`copy_in_place`), once for the
        whole tensors and once for the blocks of region owners (see :func:`_read_regions`).

    Raises:
        InvalidArgumentError: An object refused its value (``refused`` names it); no object changed.
    """
    if not assignments:
        if before_take is not None:
            before_take()
        return []
    owners: list[ValueOwner] = []
    checked: list[Any] = []
    works: list[InPlaceWork] = []
    # Asked of the few distinct classes rather than of every object (a model has thousands).
    classes = {type(trackable) for _, trackable, _, _ in assignments}
    if any(hasattr(cls, "_tp_region") for cls in classes):
        assignments, regions = _read_regions(values, assignments, owners, checked, refused)
        if regions is not None:
            works.append(regions)
    # Small values are offered to tensor owners too: they copy them into their memory anyway,
    # while a value owner takes the view read, at no cost.
    small = any(is_tensor_owner_class(cls) and not cls._tp_takes_value for cls in classes)
    reading = _Reading(assignments)
    in_place = InPlace(reading.destinations, small=small)
    owned, others = reading.read(values, in_place, owners, checked, refused)
    if before_take is not None:
        before_take()
    taken = []
    for node_id, trackable, wanted, tensors in owned:
        try:
            taken.append(cast(TensorOwner, trackable)._tp_check_restored(tensors))
        except InvalidArgumentError as exc:
            raise refused(node_id, wanted, exc) from exc
    for node_id, trackable, wanted, tensors in others:
        try:
            trackable._restore_from_tensors(tensors)
        except InvalidArgumentError as exc:
            raise refused(node_id, wanted, exc) from exc
    for (_, trackable, _, _), checked_value in zip(owned, taken):
        cast(TensorOwner, trackable)._tp_take_restored(checked_value)
    for owner, value in zip(owners, checked):
        owner._tp_take_value(value)
    if in_place.claimed:
        works.append((in_place, reading.owners, reading.targets))
    return works


class _Reading:
    """The read of a restore's whole values, with the memory their objects offer for the large ones."""

    def __init__(self, assignments: list[Assignment]) -> None:
        self.assignments = assignments
        self.owners: dict[int, ValueOwner] = {}  # row -> the value owner whose memory it is read into
        self.targets: dict[int, np.ndarray] = {}  # row -> the tensor owner's memory it is read into

    def destinations(self, rows: Sequence[int], small: Sequence[int]) -> dict[int, np.ndarray]:
        # Asked only when some values are large, or some small ones are a tensor owner's:
        # a restore of small values into value owners alone pays nothing.
        outs = {}
        value_owners, owned = _takers(self.assignments, [*rows, *small])
        large = set(rows)
        for row, owner in value_owners.items():
            if row not in large:
                continue  # the owner takes the view read, at no cost (see in_place.Destinations)
            value = owner._tp_destination()
            if value is not None:
                outs[row] = value
                self.owners[row] = owner
        self.targets.update(owned)
        outs.update(owned)
        return outs

    def read(
        self,
        values: CheckpointValues,
        in_place: InPlace,
        owners: list[ValueOwner],
        checked: list[Any],
        refused: Refused,
    ) -> tuple[list[_Read], list[_Read]]:
        """Read every value; check each value owner's as it arrives (appended to ``owners`` and
        ``checked``); return the tensor owners' and the other objects' values, to check next."""
        keys: list[str] = []
        for _, _, wanted, _ in self.assignments:
            if isinstance(wanted, str):
                keys.append(wanted)
            else:
                keys.extend(key for _, key in wanted)
        owned: list[_Read] = []
        others: list[_Read] = []
        with values.many(keys, in_place) as read:
            # _by_value inline, and no cast() (a call each): this loop runs once per variable.
            for node_id, trackable, wanted, _ in self.assignments:
                if isinstance(wanted, str) or (type(trackable)._tp_takes_value and len(wanted) == 1):
                    owner: Any = trackable  # a ValueOwner
                    try:
                        checked.append(owner._tp_check_value(next(read)))
                    except InvalidArgumentError as exc:
                        raise refused(node_id, wanted, exc) from exc
                    owners.append(owner)
                else:
                    tensors = {name: next(read) for name, _ in wanted}
                    owner_class = is_tensor_owner_class(type(trackable))
                    (owned if owner_class else others).append((node_id, trackable, wanted, tensors))
        return owned, others


def _read_regions(
    values: CheckpointValues,
    assignments: list[Assignment],
    owners: list[ValueOwner],
    checked: list[Any],
    refused: Refused,
) -> tuple[list[Assignment], InPlaceWork | None]:
    """Read and check the blocks of the region owners among ``assignments`` (appended to
    ``owners`` and ``checked``, to be taken with the rest); return the others, and the blocks
    to read in place.

    A region owner (``protocol.Region``: a sharded variable) holds one block of its tensor, so
    only the stored slices that overlap the block are read (see ``BundleReader.read_region``).
    A large block stored as one slice of exactly its bounds (a restore at the world size that
    saved) whose owner offers its memory is verified now and read into that memory once every
    value is checked, as a whole tensor would be (see :mod:`~trackpoint._format.in_place`).
    """
    rest = []
    offered: dict[int, Entry] = {}
    outs: dict[int, np.ndarray] = {}
    in_place_owners: dict[int, ValueOwner] = {}
    for assignment in assignments:
        node_id, trackable, wanted, _ = assignment
        if not hasattr(type(trackable), "_tp_region"):
            rest.append(assignment)
            continue
        key = wanted if isinstance(wanted, str) else dict(wanted)[VARIABLE_VALUE]
        full_shape, bounds = cast(Region, trackable)._tp_region()
        owner = cast(ValueOwner, trackable)
        try:
            own = owner._tp_destination()
            entry = values.region_in_place(key, bounds, full_shape, own) if own is not None else None
            if entry is not None and own is not None:
                row = len(offered)
                offered[row], outs[row], in_place_owners[row] = entry, own, owner
                value: Any = own  # the owner keeps its memory; the copy fills it
            else:
                value = values.region(key, bounds, full_shape)
            checked.append(owner._tp_check_value(value))
        except InvalidArgumentError as exc:
            raise refused(node_id, wanted, exc) from exc
        owners.append(owner)
    if not offered:
        return rest, None
    in_place = InPlace(lambda rows, small: {row: outs[row] for row in rows})
    in_place.claim(values.reader, offered)
    outs.clear()  # from here on, only the owners hold their memory (see copy_in_place)
    in_place.verify()
    return rest, (in_place, in_place_owners, {})


def _takers(assignments: list[Assignment], rows: Sequence[int]) -> tuple[dict[int, ValueOwner], dict[int, np.ndarray]]:
    """Who takes the value at each of ``rows`` (positions in the keys that :func:`assign` reads):
    the value owner of each such row, and the memory a tensor owner gave for it (see
    ``protocol.TensorOwner._tp_destinations``); rows of other objects are in neither."""
    wanted_rows = set(rows)
    value_owners: dict[int, ValueOwner] = {}
    owned: dict[int, np.ndarray] = {}
    row = 0
    for _, trackable, wanted, _ in assignments:
        if _by_value(trackable, wanted):
            if row in wanted_rows:
                value_owners[row] = cast(ValueOwner, trackable)
            row += 1
            continue
        count = len(wanted)
        if (row in wanted_rows if count == 1 else not wanted_rows.isdisjoint(range(row, row + count))) and (
            is_tensor_owner_class(type(trackable))
        ):
            given = cast(TensorOwner, trackable)._tp_destinations()
            for offset, (name, _) in enumerate(wanted):
                out = given.get(name)
                if out is not None and row + offset in wanted_rows:
                    owned[row + offset] = out
        row += count
    return value_owners, owned


def copy_in_place(in_place: InPlace, owners: dict[int, ValueOwner], targets: dict[int, np.ndarray]) -> None:
    """Read the values verified for reading in place into their value owners' and tensor owners' memory.

    Each value owner's memory is asked for again: the objects that took their values before
    (other trackables, in ``_restore_from_tensors``) run code of their own, which may have
    kept a variable's array meanwhile. An owner that offers none now takes a new value, read
    as any other value is. A tensor owner's memory is its own to vouch for.
    """
    outs = {}
    fresh = []
    for row, entry in in_place.entries.items():
        target = targets.get(row)
        if target is not None:
            outs[row] = target
            continue
        value = owners[row]._tp_destination()
        if value is not None and fits(entry, value):
            outs[row] = value
        else:
            fresh.append(row)
    in_place.copy(outs)
    if fresh:
        checked = [owners[row]._tp_check_value(in_place.read_fresh(row)) for row in fresh]
        for row, value in zip(fresh, checked):
            owners[row]._tp_take_value(value)
