"""The restore pipeline: a checkpoint's object graph matched to live objects, values assigned.

:func:`restore_checkpoint` is the whole of ``Checkpoint.read``: open the bundle, read and
parse the object graph, find the slot owners, then either repeat the previous restore's
bindings (:mod:`~trackpoint._graph.restore_record`) or walk the graph
(:mod:`~trackpoint._graph.walk`) into a plan that the coordinator
(:mod:`~trackpoint._graph.coordinator`) carries out, all or nothing.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping

from trackpoint._format import varint
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph.coordinator import RestoreCoordinator
from trackpoint._graph.gc_pause import gc_paused
from trackpoint._graph.name_based import NameBasedRestore
from trackpoint._graph.object_graph import OBJECT_GRAPH_KEY, parse_graph, read_object_graph_bytes
from trackpoint._graph.restore_record import Recorder, RestoreRecord, log, replay
from trackpoint._graph.slot_scan import slot_owners
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.epoch import structure_epoch
from trackpoint.errors import CheckpointError

__all__ = ["restore_checkpoint"]

_warned_by_name: set[str] = set()  # the prefixes restored by name so far


class _GraphChanged(Exception):
    """The object graph a repeat assumed (the last restore's) is not the checkpoint's."""


def restore_checkpoint(
    prefix: str,
    root: Trackable,
    attached: Mapping[str, Trackable],
    skip_slot_variables: bool,
    previous: RestoreRecord | None = None,
    then: Callable[[], object] | None = None,
    index: tuple[bytes, os.stat_result] | None = None,
) -> tuple[RestoreCoordinator | NameBasedRestore, RestoreRecord | None]:
    """Restore the checkpoint at ``prefix`` into ``root`` and its ``attached`` dependencies.

    Node 0 is bound to the root, then each attached dependency to its edge from node 0: one
    restore, which assigns the values of all or none. A checkpoint without an object graph
    (TF1's) is restored by name instead (:mod:`~trackpoint._graph.name_based`). No file of the
    checkpoint stays open once this returns.

    Args:
        prefix: The checkpoint.
        root: The object at node 0.
        attached: Dependencies attached to the root (``Checkpoint(root, **kwargs)``).
        skip_slot_variables: Leave optimizer slot variables alone.
        previous: The record of the previous restore into these objects, repeated instead of
            a walk when it still holds.
        then: Called once the values are in, while the files are still open (a value that
            waits on the root for an object the caller creates then is read from them).
        index: The index's bytes and stat, if the caller has just fetched them (see :class:`BundleReader`).

    Returns:
        The coordinator, or the name-based restore (for the status and restore-on-create), and
        the record to offer the next restore (None when it could not be repeated).

    Raises:
        InvalidArgumentError: A value does not fit its object.
        DataLossError: The graph or a value is damaged.
        NotFoundError: A file of the checkpoint is missing.
    """
    # At a URL, the index in hand: the data shard the last restore read whole starts downloading
    # before the index is parsed (see BundleReader), as it most likely is there again.
    early = index is not None and previous is not None and previous.read_one_shard_whole
    reader = BundleReader(prefix, index=index, one_shard_early=early)
    assumed = False  # the graph taken for the last restore's, to be compared before any value is taken
    try:
        if previous is not None and previous.reads_most(reader.entry_count):
            # The last restore into these objects read most of its checkpoint: this one (most
            # likely of the same structure) will too, so the data download starts now rather
            # than once the graph is read and matched. Only then: the first restore, which
            # may be partial, fetches only what its walk asks for.
            reader.expect_most()
            # A writer puts the graph after the values, so it arrives last: when its entry is
            # the size of the last restore's, the repeat reads the values as they arrive, and
            # the graph is compared once they are in, before any object takes one.
            assumed = _same_size(reader, previous.graph) and previous.refusal(None, skip_slot_variables, root) is None
        raw = previous.graph if assumed and previous is not None else read_object_graph_bytes(reader)
        if raw is None:  # a TF1 checkpoint
            return _restore_by_name(reader, root, attached, skip_slot_variables, then), None
        graph = parse_graph(raw, prefix, validate=False)  # the walk checks references as it follows them
        record = previous
        if record is not None and (reason := record.refusal(raw, skip_slot_variables, root)) is not None:
            log.debug("%s: walking the object graph: the previous restore's bindings do not hold: %s", prefix, reason)
            record = None
        elif record is None:
            log.debug("%s: walking the object graph: no previous restore into these objects", prefix)
        epoch = structure_epoch()
        owners = record.slot_owners if record is not None else slot_owners(raw, len(graph.nodes))
        coordinator = RestoreCoordinator(reader, graph, skip_slot_variables, owners, raw)
        if assumed:
            coordinator.before_take = functools.partial(_check_graph, reader, raw)
    except BaseException:
        reader.close()
        raise
    try:
        return _carry_out(coordinator, record, raw, epoch, root, attached, then, assumed)
    except _GraphChanged as why:
        log.debug("%s: walking the object graph: %s", prefix, why)
        reader.close()
        return restore_checkpoint(prefix, root, attached, skip_slot_variables, None, then, index)


def _same_size(reader: BundleReader, graph: bytes) -> bool:
    """Whether the checkpoint's object graph entry holds a scalar string of ``graph``'s length
    (stored as its length's varint, a 4-byte checksum, then the bytes)."""
    try:
        entry = reader.entry(OBJECT_GRAPH_KEY)
    except CheckpointError:
        return False
    length = len(graph)
    return entry.shape == () and entry.size == length + len(varint.encode(length)) + 4


def _check_graph(reader: BundleReader, assumed: bytes, failure: BaseException | None = None) -> None:
    """Raise :class:`_GraphChanged` (from ``failure``) unless the checkpoint's object graph is ``assumed``."""
    if read_object_graph_bytes(reader) != assumed:
        raise _GraphChanged("it is not the one the previous restore's bindings were made from") from failure


def _carry_out(
    coordinator: RestoreCoordinator,
    record: RestoreRecord | None,
    raw: bytes,
    epoch: int,
    root: Trackable,
    attached: Mapping[str, Trackable],
    then: Callable[[], object] | None,
    assumed: bool,
) -> tuple[RestoreCoordinator, RestoreRecord | None]:
    """Repeat ``record`` (or walk) and assign, as :func:`restore_checkpoint` says; with
    ``assumed``, a walk is never made from the graph assumed (:class:`_GraphChanged` instead)."""
    with coordinator.reading():  # the files close when this ends
        try:
            with gc_paused():
                if record is not None and replay(coordinator, record):
                    if not record.covered:  # the structure that walk saw
                        coordinator.coverage.decline("the walk this restore repeats did not bind every live object")
                else:
                    if assumed:
                        # The walk needs the checkpoint's own graph, not the one assumed.
                        raise _GraphChanged("an object of the previous restore is gone")
                    recorder = Recorder()
                    coordinator.restore(_root_bindings(coordinator, root, attached), recorder)
                    record = recorder.finish(coordinator, raw, epoch)
                coordinator.coverage.settle(epoch)
            coordinator.before_take = None  # the graph is checked: later restores (restore-on-create) need not
            if then is not None:
                then()
        except BaseException as exc:
            coordinator.silence()  # the exception says what went wrong; no second warning
            if assumed and coordinator.before_take is not None and isinstance(exc, CheckpointError):
                # A value missing or refused before the graph was compared: from another graph?
                _check_graph(coordinator.values.reader, raw, exc)
            raise
    return coordinator, record


def _restore_by_name(
    reader: BundleReader,
    root: Trackable,
    attached: Mapping[str, Trackable],
    skip_slot_variables: bool,
    then: Callable[[], object] | None,
) -> NameBasedRestore:
    if reader.prefix not in _warned_by_name:  # once a prefix: TF warns once a process
        _warned_by_name.add(reader.prefix)
        logging.getLogger("trackpoint").warning(
            "%s has no object graph (a TF1 Saver checkpoint): restoring it by name, each variable taking the value "
            "saved under its global name (tp.Variable(name=...)) and optimizer slots under TF1's slot names. Names "
            "are a fragile match: check the status (assert_consumed) and save an object-based checkpoint "
            "(Checkpoint.save) to use from now on.",
            reader.prefix,
        )
    restore = NameBasedRestore(reader, skip_slot_variables)
    with restore.values.reading(), gc_paused():  # the files close when this ends
        restore.restore(root, attached)
        if then is not None:
            then()
    return restore


def _root_bindings(
    coordinator: RestoreCoordinator, root: Trackable, attached: Mapping[str, Trackable]
) -> list[tuple[int, Trackable]]:
    root_children = {name: node_id for node_id, name in coordinator.children(0)}
    return [(0, root)] + [
        (root_children[name], obj) for name, obj in attached.items() if name != "root" and name in root_children
    ]
