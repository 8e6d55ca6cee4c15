"""``tp.Checkpoint``: save and restore a graph of trackable objects, as ``tf.train.Checkpoint`` does."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.state_file import write_state
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint._graph.gc_pause import gc_paused
from trackpoint._graph.restore import CheckpointPosition, RestoreCoordinator, parse_graph, read_object_graph_bytes
from trackpoint._graph.serialize import SerializedCheckpoint, serialize
from trackpoint._graph.slot_scan import slot_owners
from trackpoint._graph.status import CheckpointLoadStatus, InitializationOnlyStatus
from trackpoint._saving.async_writer import AsyncWriter
from trackpoint._saving.write import write_bundle
from trackpoint._tracking.autotrackable import AutoTrackable
from trackpoint._tracking.base import Trackable, structure_changed, structure_epoch
from trackpoint._tracking.data_structures import wrap_or_unwrap
from trackpoint._tracking.variables import Variable
from trackpoint.errors import InvalidArgumentError, NotFoundError
from trackpoint.options import CheckpointOptions, run_write_callbacks
from trackpoint.reader import resolve_prefix

__all__ = ["Checkpoint"]


class Checkpoint(AutoTrackable):
    """Groups trackable objects and saves/restores them with TF's object-based format.

    ``Checkpoint(**kwargs)`` makes the checkpoint itself the root, its keyword arguments
    children in sorted order; ``Checkpoint(root, **kwargs)`` makes ``root`` the root and
    attaches the other arguments (and a ``"root"`` self-edge) after its own children,
    exactly as TF lays them out, so TF restores what this writes and the other way round.

    Example:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> model = tp.Module()
        >>> model.w = tp.Variable([1.0, 2.0])
        >>> ckpt = tp.Checkpoint(model=model)
        >>> path = ckpt.save(tempfile.mkdtemp() + "/ckpt")
        >>> path.endswith("ckpt-1")
        True
        >>> _ = model.w.assign([0.0, 0.0])
        >>> ckpt.restore(path).assert_consumed().__class__.__name__
        'CheckpointLoadStatus'
        >>> model.w.numpy()
        array([1., 2.], dtype=float32)
    """

    def __init__(self, root: Trackable | None = None, **kwargs: Trackable) -> None:
        attached: dict[str, Trackable] = {}
        if root is not None:
            kwargs["root"] = root
        for name in sorted(kwargs):
            value = wrap_or_unwrap(kwargs[name])  # lists and dicts become container nodes, as in TF
            if not isinstance(value, Trackable):
                raise InvalidArgumentError(
                    f"`Checkpoint` was expecting a trackable object (an object derived from `Trackable`) for "
                    f"{name!r}, got {value!r}."
                )
            if root is not None:
                object.__setattr__(self, name, value)
                existing = root._lookup_dependency(name)
                if existing is None:
                    attached[name] = value
                elif existing is not value:
                    raise InvalidArgumentError(
                        f"Cannot create a Checkpoint with keyword argument {name!r} if root.{name} already exists.")
            else:
                setattr(self, name, value)
        object.__setattr__(self, "_tp_graph_root", root if root is not None else self)
        object.__setattr__(self, "_tp_attached", attached)
        object.__setattr__(self, "_tp_save_counter", None)

    # -- save_counter -------------------------------------------------------------------

    def _maybe_create_save_counter(self) -> Variable:
        counter = self._tp_save_counter
        if counter is not None:
            return counter

        def make(value: Any) -> Variable:
            return Variable(value, dtype=np.int64, name="save_counter", trainable=False)

        if self._tp_graph_root is self:
            counter = self._add_variable("save_counter", make, 0)
        else:
            counter = make(0)
            self._tp_attached["save_counter"] = counter
            structure_changed()
            # A restore parked the checkpoint's save_counter on the root, which has no such child.
            self._tp_graph_root._handle_deferred_dependencies("save_counter", counter)
        object.__setattr__(self, "_tp_save_counter", counter)
        return counter

    @property
    def save_counter(self) -> Variable:
        """Number of ``save()`` calls so far (an int64 variable, created on first use)."""
        return self._maybe_create_save_counter()

    # -- saving -------------------------------------------------------------------------

    def _async_writer(self) -> AsyncWriter:
        writer = self.__dict__.get("_tp_writer")
        if writer is None:
            writer = AsyncWriter()
            object.__setattr__(self, "_tp_writer", writer)
        return writer

    def _write(self, file_prefix: str, options: CheckpointOptions | None) -> str:
        """Serialize now; write (here, or on the background thread) and then run the callbacks."""
        options = CheckpointOptions.coerce(options)
        prefix = os.fspath(file_prefix)
        with gc_paused():
            serialized, plan = serialize(self._tp_graph_root, self._tp_attached, self.__dict__.get("_tp_save_plan"))
        object.__setattr__(self, "_tp_save_plan", plan)
        callbacks = list(options.experimental_write_callbacks or ())
        sharding = options.experimental_sharding_callback

        def write(state: SerializedCheckpoint) -> None:
            tensors, owners = state.with_graph()
            write_bundle(prefix, tensors, sharding, owners)
            run_write_callbacks(callbacks, prefix)

        if options.enable_async:
            snapshot = serialized.snapshot()
            self._async_writer().submit(lambda: write(snapshot))
        else:
            self.sync()  # keep saves in order behind any background write
            write(serialized)
        return prefix

    def write(self, file_prefix: str, options: CheckpointOptions | None = None) -> str:
        """Write the objects to ``file_prefix`` exactly (no numbering, no state file); return it."""
        return self._write(file_prefix, options)

    def save(self, file_prefix: str, options: CheckpointOptions | None = None) -> str:
        """Increment ``save_counter``, write ``<file_prefix>-<n>`` and point the ``checkpoint`` file at it.

        With ``enable_async`` the state file is updated by the writer thread once the files
        are complete, so it never names a half-written checkpoint.
        """
        number = int(self.save_counter.assign_add(1).numpy())
        path = f"{os.fspath(file_prefix)}-{number}"

        def record_state() -> None:
            write_state(os.path.dirname(path) or ".", path)

        return self._write(path, CheckpointOptions.coerce(options).with_callbacks(record_state))

    def sync(self) -> None:
        """Wait until background saves finish; re-raise the failure of one (unlike TF, which only waits)."""
        writer = self.__dict__.get("_tp_writer")
        if writer is not None:
            writer.sync()

    # -- restoring ----------------------------------------------------------------------

    def read(self, save_path: str | None, options: CheckpointOptions | None = None) -> CheckpointLoadStatus | InitializationOnlyStatus:
        """Restore from ``save_path`` without creating ``save_counter`` (for ``write()`` checkpoints).

        A checkpoint with the same object graph as the previous restore through this
        ``Checkpoint``, into objects unchanged since, is restored by repeating that restore's
        bindings instead of walking the graph again (the values are always read).
        """
        options = CheckpointOptions.coerce(options)
        if save_path is None:
            return InitializationOnlyStatus()
        self.sync()  # a checkpoint still being written is completed first
        prefix = resolve_prefix(save_path)
        reader = BundleReader(prefix)
        raw = read_object_graph_bytes(reader)
        if raw is None:
            raise InvalidArgumentError(
                f"{prefix} is not an object-based checkpoint (no {OBJECT_GRAPH_KEY} key); read its tensors with "
                "tp.load_checkpoint()"
            )
        graph = parse_graph(raw, prefix, validate=False)  # the restore checks references as it walks
        # The same graph restored into the same, unchanged objects as last time: repeat that
        # restore's bindings instead of walking (see RestoreReplay).
        replay = self.__dict__.get("_tp_restore_replay")
        skip_slots = options.experimental_skip_slot_variables
        root = self._tp_graph_root
        replay = replay if replay is not None and replay.applies_to(raw, skip_slots, root) else None
        epoch = structure_epoch()
        owners = replay.slot_owners if replay is not None else slot_owners(raw, len(graph.nodes))
        coordinator = RestoreCoordinator(reader, graph, skip_slots, owners, raw)
        try:
            with gc_paused():
                if replay is None or not coordinator.replay(replay):
                    self._restore_root(coordinator, root)
                    replay = coordinator.replay_plan(raw, epoch)
        except BaseException:
            coordinator.expect_partial = True  # the exception says what went wrong; no second warning
            raise
        object.__setattr__(self, "_tp_restore_replay", replay)
        return CheckpointLoadStatus(coordinator, root, self._tp_attached)

    def _restore_root(self, coordinator: RestoreCoordinator, root: Trackable) -> None:
        """Bind node 0 to the root, then each attached dependency to its edge from node 0."""
        CheckpointPosition(coordinator, 0).restore(root)
        root_children = {name: node_id for node_id, name in coordinator.children(0)}
        for name, obj in self._tp_attached.items():
            if name != "root" and name in root_children:
                CheckpointPosition(coordinator, root_children[name]).restore(obj)

    def restore(self, save_path: str | None, options: CheckpointOptions | None = None) -> CheckpointLoadStatus | InitializationOnlyStatus:
        """Restore from a prefix (or a directory with a ``checkpoint`` file); values arrive now or on creation.

        Raises:
            NotFoundError: Nothing at ``save_path`` (the message suggests the ``-N`` suffix).
            InvalidArgumentError: A dtype or shape mismatch, naming the key and both sides.
        """
        try:
            status = self.read(save_path, options)
        except NotFoundError as exc:
            if save_path is None or os.path.isdir(save_path):
                raise
            raise NotFoundError(f"{exc}. Checkpoint.save() numbers its prefixes: did you mean '{save_path}-1' or "
                                "the directory holding them?") from exc
        try:
            self._maybe_create_save_counter()
        except BaseException:
            status.expect_partial()
            raise
        return status
