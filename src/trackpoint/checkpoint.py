"""``tp.Checkpoint``: save and restore a graph of trackable objects, as ``tf.train.Checkpoint`` does."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from trackpoint._format.state_file import point_state_at, require_swappable, resolve_index
from trackpoint._graph import kept_values
from trackpoint._graph.gc_pause import gc_paused
from trackpoint._graph.restore import restore_checkpoint
from trackpoint._graph.restore_record import RestoreRecord
from trackpoint._graph.save_layout import SaveLayout
from trackpoint._graph.serialize import SerializedCheckpoint, serialize
from trackpoint._graph.status import CheckpointLoadStatus, InitializationOnlyStatus
from trackpoint._saving.async_writer import AsyncWriter
from trackpoint._saving.device_spec import parse_device
from trackpoint._saving.write import write_bundle
from trackpoint._storage import files
from trackpoint._storage.storage import storage_for
from trackpoint._storage.storage_options import use_storage_options
from trackpoint._tracking.autotrackable import AutoTrackable
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.data_structures import wrap_or_unwrap
from trackpoint._tracking.epoch import structure_changed
from trackpoint._tracking.variables import Variable
from trackpoint.distributed._coordinator import Coordinator
from trackpoint.distributed._resolve import coordinator_for
from trackpoint.errors import DeadReferenceError, InvalidArgumentError, NotFoundError, WriteError
from trackpoint.options import CheckpointOptions, run_write_callbacks

__all__ = ["Checkpoint"]


def _deref(held: Trackable | weakref.ref[Trackable]) -> Trackable:
    """The object itself, or the referent of a weakly held root (raising once it is gone)."""
    if not isinstance(held, weakref.ref):
        return held
    obj = held()
    if obj is None:
        raise _dead_root_error()
    return obj


def _dead_root_error() -> DeadReferenceError:
    return DeadReferenceError(
        "The root of this Checkpoint was passed as a weak reference (Checkpoint(root=weakref.ref(obj))) and has "
        "been garbage-collected, so there is nothing to save or restore. Keep a reference to the root for as long as "
        "the Checkpoint is used, or pass the object itself."
    )


class _Attached(Mapping[str, Trackable]):
    """The dependencies attached to a ``Checkpoint(root)``'s root, by name.

    A root given as a weak reference is held as that reference, its ``"root"`` self-edge
    included, and looked up on each use, so the checkpoint never keeps it alive.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, Trackable | weakref.ref[Trackable]] = {}

    def __getitem__(self, name: str) -> Trackable:
        return _deref(self._items[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setitem__(self, name: str, value: Trackable | weakref.ref[Trackable]) -> None:
        self._items[name] = value


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

    def __init__(self, root: Trackable | weakref.ref[Trackable] | None = None, **kwargs: Trackable) -> None:
        """Group ``kwargs`` under this checkpoint, or attach them to ``root``.

        Args:
            root: The root object, or a ``weakref.ref`` to it, as TF accepts: the checkpoint
                then holds only the weak reference (``ckpt.root`` is that reference) and, once
                the object is gone, saving or restoring raises
                :class:`~trackpoint.errors.DeadReferenceError`.
            **kwargs: Trackable objects (or lists, dicts, tuples of them) to checkpoint.

        Raises:
            InvalidArgumentError: An argument is not trackable (a dead weak reference
                included), or ``root`` already has another child of a keyword's name.
        """
        attached = _Attached()
        root_ref: weakref.ref[Trackable] | None = None
        graph_root: Trackable | None = None
        if isinstance(root, weakref.ref):
            root_ref, graph_root = root, root()
        else:
            graph_root = root
        if root is not None:
            if not isinstance(graph_root, Trackable):
                dead = " (the weak reference's object is gone)" if root_ref is not None and graph_root is None else ""
                raise InvalidArgumentError(
                    f"`Checkpoint` was expecting root to be a trackable object (an object derived from `Trackable`), "
                    f"got {graph_root!r}{dead}."
                )
            kwargs["root"] = graph_root
        for name in sorted(kwargs):
            value = wrap_or_unwrap(kwargs[name])  # lists and dicts become container nodes, as in TF
            if not isinstance(value, Trackable):
                raise InvalidArgumentError(
                    f"`Checkpoint` was expecting a trackable object (an object derived from `Trackable`) for "
                    f"{name!r}, got {value!r}."
                )
            if graph_root is not None:
                held = root_ref if name == "root" and root_ref is not None else value
                object.__setattr__(self, name, held)
                existing = graph_root._lookup_dependency(name)
                if existing is None:
                    attached[name] = held
                elif existing is not value:
                    raise InvalidArgumentError(
                        f"Cannot create a Checkpoint with keyword argument {name!r} if root.{name} already exists."
                    )
            else:
                setattr(self, name, value)
        # None when the checkpoint is its own root: a reference to itself would be a cycle,
        # which keeps it and its variables alive until the garbage collector runs.
        object.__setattr__(self, "_tp_root", root_ref if root_ref is not None else graph_root)
        object.__setattr__(self, "_tp_attached", attached)
        object.__setattr__(self, "_tp_save_counter", None)

    # Set with object.__setattr__ (AutoTrackable would track them as children): in __init__,
    # and the last three when first needed.
    _tp_root: Trackable | weakref.ref[Trackable] | None
    _tp_attached: _Attached
    _tp_save_counter: Variable | None
    _tp_writer: AsyncWriter | None = None
    _tp_save_layout: SaveLayout | None = None  # of the last save, for the next (see _graph/save_layout.py)
    _tp_restore_record: RestoreRecord | None = None  # of the last restore, for the next (_graph/restore_record.py)

    @property
    def _tp_graph_root(self) -> Trackable:
        """The object at node 0: the root given, or this checkpoint.

        Raises:
            DeadReferenceError: The root was given as a weak reference and is gone.
        """
        root = self._tp_root
        return self if root is None else _deref(root)

    def _count_save(self, file_prefix: str | None = None) -> int:
        """Add one to ``save_counter`` for a numbered save and return it; a root that is gone
        raises first, so a save that cannot happen uses up no number.

        At a URL ``file_prefix``, numbers whose ``<file_prefix>-<n>`` holds objects already are
        skipped (the counter moves past them too): a writer killed mid-save left them, and an
        object store's save never overwrites (see ``object_bundles``). A job restarted from
        its last checkpoint thus saves the next free number instead of failing.
        """
        _ = self._tp_graph_root  # raises DeadReferenceError once a weakly held root is gone
        number = int(self.save_counter.assign_add(1).numpy())
        if file_prefix is not None:
            taken = storage_for(file_prefix).prefixes_in_use(os.path.dirname(file_prefix))
            while f"{file_prefix}-{number}" in taken:
                number = int(self.save_counter.assign_add(1).numpy())
        return number

    # -- save_counter -------------------------------------------------------------------

    def _maybe_create_save_counter(self) -> Variable:
        counter = self._tp_save_counter
        if counter is not None:
            return counter

        def make(value: Any) -> Variable:
            return Variable(value, dtype=np.int64, name="save_counter", trainable=False)

        root = self._tp_root
        if root is None:
            counter = self._add_variable("save_counter", make, 0)
        else:
            counter = make(0)
            self._tp_attached["save_counter"] = counter
            structure_changed()
            # A restore parked the checkpoint's save_counter on the root, which has no such
            # child. (A weakly held root that is gone has nothing parked: the counter is
            # still made, as TF makes it.)
            live_root = root() if isinstance(root, weakref.ref) else root
            if live_root is not None:
                live_root._handle_deferred_dependencies("save_counter", counter)
        object.__setattr__(self, "_tp_save_counter", counter)
        return counter

    @property
    def save_counter(self) -> Variable:
        """Number of ``save()`` calls so far (an int64 variable, created on first use)."""
        return self._maybe_create_save_counter()

    # -- saving -------------------------------------------------------------------------

    def _async_writer(self) -> AsyncWriter:
        writer = self._tp_writer
        if writer is None:
            writer = AsyncWriter()
            object.__setattr__(self, "_tp_writer", writer)
        return writer

    def _write(
        self,
        file_prefix: str,
        options: CheckpointOptions | None,
        record: Callable[[], None] | None = None,
        follow: Callable[[], None] | None = None,
    ) -> str:
        """Serialize now; write (here, or on the background thread), then run the callbacks.

        ``record`` (the state file's update) runs after the write callbacks, as TF appends it
        to them, but also when a callback raises: the checkpoint is complete either way, and
        the callback's error is raised after it is recorded.
        """
        options = CheckpointOptions.coerce(options)
        prefix = os.fspath(file_prefix)
        with gc_paused():
            weak_root = isinstance(self._tp_root, weakref.ref)
            try:
                serialized, layout = serialize(self._tp_graph_root, self._tp_attached, self._tp_save_layout, weak_root)
            except InvalidArgumentError as exc:  # an object refused its state: nothing was written
                raise type(exc)(f"{prefix}: {exc}", path=prefix, key=exc.key) from exc
        object.__setattr__(self, "_tp_save_layout", layout)
        callbacks = list(options.experimental_write_callbacks or ())
        sharding = options.experimental_sharding_callback
        coordinator = coordinator_for(options.coordinator)
        if coordinator is not None:
            return self._write_together(coordinator, prefix, serialized, options, record, follow)

        def write(state: SerializedCheckpoint) -> None:
            # Encoding the graph and the index entries is the save's burst of allocations
            # (see gc_pause); on the writer thread too, whose pause is as long as the write.
            with gc_paused():
                tensors, owners = state.with_graph()
                write_bundle(prefix, tensors, sharding, owners)
            try:
                run_write_callbacks(callbacks, prefix)
            finally:
                if record is not None:
                    record()

        if options.enable_async:
            snapshot = serialized.snapshot()
            self._async_writer().submit(lambda: write(snapshot), prefix)
        else:
            self.sync()  # keep saves in order behind any background write
            write(serialized)
        return prefix

    def _write_together(
        self,
        coordinator: Coordinator,
        prefix: str,
        serialized: SerializedCheckpoint,
        options: CheckpointOptions,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> str:
        """:meth:`_write` on every rank of a job (see :mod:`trackpoint.distributed`): the plan is
        agreed here, the writes and the commit happen on the writer thread for async saves."""
        from trackpoint.distributed._save import plan_save

        device = options.experimental_io_device
        io_rank = parse_device(device).task if device is not None else None
        callbacks = list(options.experimental_write_callbacks or ())
        self.sync()  # keep saves in order behind any background write: the ranks' exchanges pair up in order
        with gc_paused():
            tensors, _ = serialized.with_graph()
        planned = plan_save(coordinator, prefix, tensors, io_rank)

        def write(state: SerializedCheckpoint) -> None:
            kept_values.keep_values_of(prefix)
            with gc_paused():
                tensors, owners = state.with_graph()
                planned.execute(tensors, owners, options.experimental_sharding_callback, record, follow)
            run_write_callbacks(callbacks, prefix)

        if options.enable_async:
            snapshot = serialized.snapshot()
            self._async_writer().submit(lambda: write(snapshot), prefix)
        else:
            write(serialized)
        return prefix

    def write(
        self,
        file_prefix: str,
        options: CheckpointOptions | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> str:
        """Write the objects to ``file_prefix`` exactly (no numbering, no state file); return it.

        Args:
            file_prefix: The checkpoint prefix: a local path or an fsspec URL.
            options: A :class:`CheckpointOptions`.
            storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``,
                ``key``, ``secret``...), kept process-wide for the URLs beside it, as a background
                save and values restored on creation reach them after this returns (see
                :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

        Example:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> path = tp.Checkpoint(w=tp.Variable(1.0)).write(tempfile.mkdtemp() + "/weights")
            >>> path.endswith("/weights")
            True
        """
        use_storage_options(file_prefix, storage_options)
        return self._write(file_prefix, options)

    def save(
        self,
        file_prefix: str,
        options: CheckpointOptions | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> str:
        """Increment ``save_counter``, write ``<file_prefix>-<n>`` and point the ``checkpoint`` file at it.

        With ``enable_async`` the state file is updated by the writer thread once the files
        are complete, so it never names a half-written checkpoint.

        Args:
            file_prefix: The prefix to number: a local path or an fsspec URL (``s3://bucket/run/ckpt``).
            options: A :class:`CheckpointOptions`.
            storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``,
                ``key``, ``secret``...), kept process-wide for the URLs beside it, as a background
                save and values restored on creation reach them after this returns (see
                :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

        Raises:
            InvalidArgumentError: ``storage_options`` is not a mapping with ``str`` keys, or is
                given for a local path.

        Example:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> tp.Checkpoint(w=tp.Variable(1.0)).save(tempfile.mkdtemp() + "/ckpt").endswith("/ckpt-1")
            True
        """
        use_storage_options(file_prefix, storage_options)
        directory = os.path.dirname(os.fspath(file_prefix)) or "."
        require_swappable(directory)  # before the counter moves
        number = self._count_save(os.fspath(file_prefix))
        path = f"{os.fspath(file_prefix)}-{number}"

        def record_state() -> None:
            try:
                point_state_at(directory, path)
            except OSError as exc:
                raise WriteError(
                    f"checkpoint {path} is complete, but the state file {os.path.join(directory, 'checkpoint')} could "
                    f"not be updated to name it ({exc}); the state file still names what it named before. Restore "
                    f"{path} by its path, or free space and save again."
                ) from exc

        return self._write(path, options, record_state)

    def sync(self) -> None:
        """Wait until background saves finish; re-raise the failure of one (unlike TF, which only waits)."""
        writer = self._tp_writer
        if writer is not None:
            writer.sync()

    # -- restoring ----------------------------------------------------------------------

    def read(
        self,
        save_path: str | None,
        options: CheckpointOptions | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> CheckpointLoadStatus | InitializationOnlyStatus:
        """Restore from ``save_path`` without creating ``save_counter`` (for ``write()`` checkpoints).

        A checkpoint with the same object graph as the previous restore through this
        ``Checkpoint``, into objects unchanged since, is restored by repeating that restore's
        bindings instead of walking the graph again (the values are always read; see
        ``_graph/restore_record.py``).

        No file of the checkpoint stays open once this returns, not even while values wait
        for objects to be created (restore-on-create): such a value is read when its object
        appears, from the files reopened for that read, which must be the same files (same
        inode, size and modification time). A checkpoint replaced, modified or deleted in
        between raises ``DataLossError`` (``NotFoundError`` if deleted) naming the file and
        key, never another checkpoint's values; restore again to read it as it is now.

        The values for the objects that exist are all assigned or, if one is damaged,
        missing or of another dtype or shape, none (the error names the key and the file).

        Args:
            save_path: A checkpoint prefix (a local path or an fsspec URL), or None (nothing to read).
            options: A :class:`CheckpointOptions`.
            storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``,
                ``key``, ``secret``...), kept process-wide for the URLs beside it, as a background
                save and values restored on creation reach them after this returns (see
                :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

        Example:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> path = tp.Checkpoint(w=tp.Variable(1.0)).write(tempfile.mkdtemp() + "/weights")
            >>> w = tp.Variable(0.0)
            >>> _ = tp.Checkpoint(w=w).read(path).assert_consumed()
            >>> float(w.numpy())
            1.0
        """
        if save_path is not None:
            use_storage_options(save_path, storage_options)
        return self._read(save_path, options, with_counter=False)

    def _read(
        self, save_path: str | None, options: CheckpointOptions | None, with_counter: bool, listed_by: str | None = None
    ) -> CheckpointLoadStatus | InitializationOnlyStatus:
        """Restore from a prefix, or a directory's latest; ``listed_by``: the directory whose
        state file named the prefix, if known (the report notes a prefix outside it)."""
        options = CheckpointOptions.coerce(options)
        if save_path is None:
            return InitializationOnlyStatus()
        root = self._tp_graph_root  # a weakly held root that is gone raises before any file is opened
        self.sync()  # a checkpoint still being written is completed first
        if listed_by is None and os.path.isdir(save_path):
            listed_by = os.fspath(save_path)
        prefix, index = resolve_index(save_path)
        coordinator, record = restore_checkpoint(
            prefix,
            root,
            self._tp_attached,
            options.experimental_skip_slot_variables,
            self._tp_restore_record,
            self._maybe_create_save_counter if with_counter else None,
            index,
        )
        object.__setattr__(self, "_tp_restore_record", record)
        return CheckpointLoadStatus(coordinator, root, self._tp_attached, listed_by)

    def restore(
        self,
        save_path: str | None,
        options: CheckpointOptions | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> CheckpointLoadStatus | InitializationOnlyStatus:
        """Restore from a prefix (or a directory with a ``checkpoint`` file); values arrive now or on creation.

        As :meth:`read` does, it assigns the values of all existing objects or none. When
        ``save_path`` is a directory whose state file names a checkpoint elsewhere, the
        status's ``report().notes`` says where it was read from.

        Args:
            save_path: A checkpoint prefix or a directory with a ``checkpoint`` state file (a
                local path or an fsspec URL), or None (nothing to restore).
            options: A :class:`CheckpointOptions`.
            storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``,
                ``key``, ``secret``...), kept process-wide for the URLs beside it, as a background
                save and values restored on creation reach them after this returns (see
                :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

        Raises:
            NotFoundError: Nothing at ``save_path`` (the message lists the checkpoints that exist
                in its directory).
            InvalidArgumentError: A dtype or shape mismatch, naming the key and both sides.
            DataLossError: A value is damaged (its checksum fails), naming the file and key.
            InvalidArgumentError: Also: ``storage_options`` is not a mapping with ``str`` keys,
                or is given for a local path.

        Example:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> directory = tempfile.mkdtemp()
            >>> _ = tp.Checkpoint(w=tp.Variable(1.0)).save(directory + "/ckpt")
            >>> w = tp.Variable(0.0)
            >>> _ = tp.Checkpoint(w=w).restore(directory)
            >>> float(w.numpy())
            1.0
        """
        if save_path is not None:
            use_storage_options(save_path, storage_options)
        try:
            status = self._read(save_path, options, with_counter=True)
        except NotFoundError as exc:
            if save_path is None or os.path.isdir(save_path) or os.path.exists(f"{os.fspath(save_path)}.index"):
                raise  # not a prefix missing its number: a missing data shard, say
            listing = files.listing(os.path.dirname(os.fspath(save_path)))
            raise NotFoundError(
                f"{str(exc).rstrip('.')}{listing}. Checkpoint.save() numbers its prefixes (ckpt-1, ckpt-2, ...): pass "
                "one of them, or the directory holding their 'checkpoint' file"
            ) from exc
        if isinstance(status, InitializationOnlyStatus):
            self._maybe_create_save_counter()
        return status

    def _restore_listed(
        self, prefix: str, directory: str, options: CheckpointOptions | None = None
    ) -> CheckpointLoadStatus | InitializationOnlyStatus:
        """:meth:`restore` ``prefix``, which the state file of ``directory`` named (for
        ``CheckpointManager.restore_or_initialize``): the report notes a prefix outside it."""
        return self._read(prefix, options, with_counter=True, listed_by=os.fspath(directory))
