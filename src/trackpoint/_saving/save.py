"""The save pipeline: live objects serialized, written here or in the background, committed, recorded.

:func:`save_checkpoint` is the whole of ``Checkpoint.write`` (and of ``save`` and
``CheckpointManager.save`` after they pick a number), as
:func:`trackpoint._graph.restore.restore_checkpoint` is the whole of a restore. A save runs,
in this order:

1. ``before_write()``, if given, on the calling thread: a ``Checkpoint`` subclass refuses
   objects it cannot save here, before anything is serialized or written
   (``trackpoint.torch.Checkpoint`` refuses tensors that alias each other); it is
   :meth:`Checkpoint._tp_before_write <trackpoint.checkpoint.Checkpoint._tp_before_write>`.
2. Serialize (with the cyclic collector paused, see :mod:`trackpoint._graph.gc_pause`): the
   object graph and the tensors, by the previous save's layout when it still holds. An
   object that refuses its state raises here; nothing was written.
3. Plan, on the calling thread: the committer (:mod:`.committer`) of these options plans the
   save; a save of several processes agrees here on who writes what.
4. Write, here or, for ``enable_async``, on the checkpoint's writer thread from a snapshot of
   the values (a later save waits for it): the graph and the index entries are encoded and
   the committer writes the files and commits the checkpoint. The values a restore of the
   prefix still waits to hand out are read into memory first (:mod:`trackpoint._graph.kept_values`).
5. The write callbacks (``experimental_write_callbacks``), in order, with the prefix.
6. ``record()``, if given (the state file's update: ``Checkpoint.save`` and
   ``CheckpointManager.save`` pass one): after the callbacks, and also when one raises, since
   the checkpoint is complete either way (the callback's error is raised after it). A
   committer that records at its commit point (several processes) runs it there instead,
   before the callbacks, on the committing process; every other process runs ``follow()``
   once it knows the checkpoint is committed (the manager reads the state file then).

Examples:
    >>> import tempfile
    >>> import trackpoint as tp
    >>> prefix = tempfile.mkdtemp() + "/weights"
    >>> recorded = []
    >>> save_checkpoint(
    ...     prefix, tp.Variable(1.0), {}, SaveSettings(), SaveState(), record=lambda: recorded.append(prefix)
    ... ) == prefix
    True
    >>> recorded == [prefix]
    True
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trackpoint._format.state_file import point_state_at
from trackpoint._graph import kept_values
from trackpoint._graph.gc_pause import gc_paused
from trackpoint._graph.save_layout import SaveLayout
from trackpoint._graph.serialize import SerializedCheckpoint, serialize
from trackpoint._saving import cpus, writer_process
from trackpoint._saving.async_writer import AsyncWriter
from trackpoint._saving.committer import Commit, Committer, Tensors, committer_for
from trackpoint._saving.incremental import Previous
from trackpoint._saving.incremental_objects import PreviousObjects
from trackpoint._saving.sharding_policies import ShardingCallback
from trackpoint._saving.write import write_bundle, write_incremental_bundle
from trackpoint._storage.storage import storage_for
from trackpoint._tracking.base import Trackable
from trackpoint.errors import InvalidArgumentError, WriteError

__all__ = ["ALONE", "SaveSettings", "SaveState", "run_write_callbacks", "save_checkpoint", "state_file_record"]


@dataclass(frozen=True)
class SaveSettings:
    """The options of one save (taken from ``CheckpointOptions`` when the save starts).

    Attributes:
        enable_async: Write on the writer thread; return once the values are snapshotted.
        callbacks: The write callbacks, each taking no argument or the prefix.
        sharding: Splits tensors over data files; None writes one.
        coordinator: The ``coordinator`` option, for :func:`.committer.committer_for`.
        io_device: The ``experimental_io_device`` option, likewise.
        incremental: Link the data files whose tensors did not change since the checkpoint's
            previous incremental save (see :mod:`.incremental`).
        in_process: Write an async save of this process alone, at a local path and with no
            sharding callback, in the writer process (see :mod:`.writer_process`).
    """

    enable_async: bool = False
    callbacks: Sequence[Callable[..., Any]] = ()
    sharding: ShardingCallback | None = None
    coordinator: Any = None
    io_device: str | None = None
    incremental: bool = False
    in_process: bool = False


class _AloneCommit:
    """This process writes the whole bundle; the index, renamed into place last, commits it."""

    records = False

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def write(
        self,
        tensors: Tensors,
        owners: Sequence[Any],
        sharding: ShardingCallback | None,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> None:
        write_bundle(self.prefix, tensors, sharding, owners, keep_values=False)  # the pipeline kept them


class _IncrementalCommit:
    """This process writes the bundle, linking the previous save's unchanged files (see :mod:`.incremental`)."""

    records = False

    def __init__(self, prefix: str, state: SaveState) -> None:
        self.prefix = prefix
        self.state = state

    def write(
        self,
        tensors: Tensors,
        owners: Sequence[Any],
        sharding: ShardingCallback | None,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> None:
        previous, self.state.previous = self.state.previous, None  # a failed save leaves no record to trust
        self.state.previous = write_incremental_bundle(self.prefix, tensors, previous)


class _ChildCommit(_AloneCommit):
    """An async save of this process alone to a local path, written by the writer process (see
    :mod:`.writer_process`); what the child cannot be sent (a slice of a larger tensor, say), this
    thread writes as :class:`_AloneCommit` does."""

    def write(
        self,
        tensors: Tensors,
        owners: Sequence[Any],
        sharding: ShardingCallback | None,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> None:
        if not writer_process.write_in_child(self.prefix, tensors):
            super().write(tensors, owners, sharding, record, follow)


def _in_child(settings: SaveSettings, committer: Committer, prefix: str) -> bool:
    """Whether this save is written by the writer process (``async_writer="process"``)."""
    wanted = settings.in_process and settings.enable_async and writer_process.AVAILABLE
    # An object store's saves upload local copies: the thread that made them uploads them.
    return wanted and committer is ALONE and settings.sharding is None and not storage_for(prefix).local_copies


class _Alone:
    """The committer of a process saving alone: nothing to agree on, so nothing to plan."""

    def plan(self, prefix: str, tensors: Callable[[], Tensors], settle: Callable[[], None]) -> Commit:
        return _AloneCommit(prefix)


ALONE: Committer = _Alone()
"""The committer of a process that saves alone (no resolver claimed the save, see :mod:`.committer`)."""


class SaveState:
    """What a checkpoint's saves keep between them: the last save's layout (see
    :mod:`trackpoint._graph.save_layout`), and the writer thread of its async saves.

    Examples:
        >>> state = SaveState()
        >>> state.settle()  # no background write: returns at once
        >>> state.layout is None
        True
    """

    __slots__ = ("_writer", "layout", "previous")

    def __init__(self) -> None:
        self.layout: SaveLayout | None = None
        self._writer: AsyncWriter | None = None
        self.previous: Previous | PreviousObjects | None = None  # the last incremental save's files and hashes

    def settle(self) -> None:
        """Wait until the background write finishes; re-raise its failure (once)."""
        if self._writer is not None:
            self._writer.sync()

    def background(self) -> AsyncWriter:
        """The writer thread, started on first use."""
        if self._writer is None:
            self._writer = AsyncWriter()
        return self._writer


def save_checkpoint(
    prefix: str,
    root: Trackable,
    attached: Mapping[str, Trackable],
    settings: SaveSettings,
    state: SaveState,
    *,
    weak_root: bool = False,
    before_write: Callable[[], None] | None = None,
    record: Callable[[], None] | None = None,
    follow: Callable[[], None] | None = None,
) -> str:
    """Save ``root`` and its ``attached`` dependencies to ``prefix``, in the order of the module docstring.

    Args:
        prefix: The checkpoint prefix, exactly (numbering is the caller's).
        root: The object at node 0.
        attached: Dependencies attached to the root (``Checkpoint(root, **kwargs)``).
        settings: The save's options.
        state: The checkpoint's :class:`SaveState`: the layout is read and replaced, and
            writes wait for the one in the background.
        weak_root: The caller holds the root only weakly: no layout is kept (it would keep
            the objects alive).
        before_write: Step 1.
        record: Step 6: runs once the checkpoint is complete.
        follow: Step 6, on the processes of a save of several that do not record.

    Returns:
        ``prefix`` (its files may still be being written, for an async save).

    Raises:
        InvalidArgumentError: An object refused its state (nothing was written).
        WriteError: The files could not be written; nothing was committed.
    """
    if before_write is not None:
        before_write()
    with gc_paused():
        try:
            serialized, state.layout = serialize(root, attached, state.layout, weak_root)
        except InvalidArgumentError as exc:  # an object refused its state: nothing was written
            raise type(exc)(f"{prefix}: {exc}", path=prefix, key=exc.key) from exc
    callbacks = list(settings.callbacks)
    sharding = settings.sharding

    def planned_tensors() -> Sequence[tuple[str, Any]]:
        with gc_paused():
            return serialized.with_graph()[0]

    committer = committer_for(settings.coordinator, settings.io_device) or ALONE
    if settings.incremental:
        if committer is not ALONE:
            raise InvalidArgumentError(
                f"{prefix}: incremental saves of several processes are not supported; save with "
                "CheckpointOptions(incremental=False) there"
            )
        if sharding is not None:
            raise InvalidArgumentError(
                f"{prefix}: an incremental save decides its data files itself (the tensors that stopped changing "
                "share files, linked by the next save); drop experimental_sharding_callback or incremental=True"
            )
        commit: Commit = _IncrementalCommit(prefix, state)
    elif _in_child(settings, committer, prefix):
        commit = _ChildCommit(prefix)
    else:
        commit = committer.plan(prefix, planned_tensors, state.settle)

    def write(values: SerializedCheckpoint) -> None:
        kept_values.keep_values_of(prefix)  # an overwrite: values a restore of it still waits to hand out
        # Encoding the graph and the index entries is the save's burst of allocations (see
        # gc_pause); on the writer thread too, whose pause is as long as the write.
        with gc_paused():
            tensors, owners = values.with_graph()
            commit.write(tensors, owners, sharding, record if commit.records else None, follow)
        _finish(commit, callbacks, prefix, record)

    if settings.enable_async:
        snapshot = serialized.snapshot()
        saver = cpus.current()  # the training loop's CPU, left to it (see .cpus)

        def write_off_the_loop() -> None:
            cpus.keep_off(saver)
            write(snapshot)

        state.background().submit(write_off_the_loop, prefix)
    else:
        state.settle()  # keep saves in order behind any background write
        write(serialized)
    return prefix


def _finish(
    commit: Commit, callbacks: Sequence[Callable[..., Any]], prefix: str, record: Callable[[], None] | None
) -> None:
    """Steps 5 and 6 once the checkpoint is committed."""
    if commit.records or record is None:
        run_write_callbacks(callbacks, prefix)
        return
    try:
        run_write_callbacks(callbacks, prefix)
    finally:
        record()


def run_write_callbacks(callbacks: Sequence[Callable[..., Any]], save_path: str) -> None:
    """Call each callback with the save path when it accepts one, in list order.

    Examples:
        >>> seen = []
        >>> run_write_callbacks([seen.append, lambda: seen.append("no argument")], "ckpt-1")
        >>> seen
        ['ckpt-1', 'no argument']
    """
    for callback in callbacks:
        try:
            params = list(inspect.signature(callback).parameters.values())
        except (TypeError, ValueError):
            callback(save_path)
            continue
        takes_path = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)
        callback(save_path) if takes_path else callback()


def state_file_record(directory: str, path: str) -> Callable[[], None]:
    """The ``record`` of ``Checkpoint.save``: point the state file of ``directory`` at ``path``.

    Raises (when called):
        WriteError: The state file could not be updated; the checkpoint is complete.
    """

    def record() -> None:
        try:
            point_state_at(directory, path)
        except OSError as exc:
            raise WriteError(
                f"checkpoint {path} is complete, but the state file {os.path.join(directory, 'checkpoint')} could "
                f"not be updated to name it ({exc}); the state file still names what it named before. Restore "
                f"{path} by its path, or free space and save again."
            ) from exc

    return record
