"""``tp.Checkpoint``: save and restore a graph of trackable objects, as ``tf.train.Checkpoint`` does."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from trackpoint._format.state_file import require_swappable, resolve_index
from trackpoint._graph.name_based import NameBasedRestore
from trackpoint._graph.restore import restore_checkpoint
from trackpoint._graph.restore_record import RestoreRecord
from trackpoint._graph.status import CheckpointLoadStatus, InitializationOnlyStatus, NameBasedSaverStatus
from trackpoint._saving.save import SaveSettings, SaveState, save_checkpoint, state_file_record
from trackpoint._storage import files
from trackpoint._storage.storage import storage_for
from trackpoint._storage.storage_options import use_storage_options
from trackpoint._tracking.attached import Attached, attach, deref
from trackpoint._tracking.autotrackable import AutoTrackable
from trackpoint._tracking.base import Trackable
from trackpoint._tracking.epoch import structure_changed
from trackpoint._tracking.variables import Variable
from trackpoint.errors import NotFoundError
from trackpoint.options import CheckpointOptions

__all__ = ["Checkpoint"]

#: What a restore returns: an object-based checkpoint's status, a TF1 checkpoint's, or nothing's.
Status = CheckpointLoadStatus | NameBasedSaverStatus | InitializationOnlyStatus


class Checkpoint(AutoTrackable):
    """Groups trackable objects and saves/restores them with TF's object-based format.

    ``Checkpoint(**kwargs)`` makes the checkpoint itself the root, its keyword arguments
    children in sorted order; ``Checkpoint(root, **kwargs)`` makes ``root`` the root and
    attaches the other arguments (and a ``"root"`` self-edge) after its own children,
    exactly as TF lays them out, so TF restores what this writes and the other way round.

    Examples:
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
        held_root, attached, fields = attach(root, kwargs)
        for name, value in fields:
            if held_root is None:
                setattr(self, name, value)  # tracked: the checkpoint is the root
            else:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "_tp_root", held_root)
        object.__setattr__(self, "_tp_attached", attached)
        object.__setattr__(self, "_tp_save_counter", None)
        object.__setattr__(self, "_tp_saving", SaveState())

    # Set with object.__setattr__ (AutoTrackable would track them as children): in __init__,
    # and the last two when first needed.
    _tp_root: Trackable | weakref.ref[Trackable] | None
    _tp_attached: Attached
    _tp_save_counter: Variable | None
    _tp_saving: SaveState  # what one save leaves for the next: the layout, the writer thread (_saving/save.py)
    _tp_restore_record: RestoreRecord | None = None  # of the last restore, for the next (_graph/restore_record.py)

    @property
    def _tp_graph_root(self) -> Trackable:
        """The object at node 0: the root given, or this checkpoint.

        Raises:
            DeadReferenceError: The root was given as a weak reference and is gone.
        """
        root = self._tp_root
        return self if root is None else deref(root)

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
            structure_changed()  # attached to the root from outside its children: noted on no object
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

    def _tp_before_write(self) -> None:
        """Hook: runs first in every ``save`` and ``write`` of this checkpoint, before anything
        is serialized (step 1 of the save pipeline, :mod:`trackpoint._saving.save`).

        A subclass overrides it to refuse, by raising, objects it cannot save
        (``trackpoint.torch.Checkpoint`` refuses tensors that alias each other). The
        default does nothing.
        """

    def _save(
        self,
        file_prefix: str,
        options: CheckpointOptions | None,
        *,
        record: Callable[[], None] | None = None,
        follow: Callable[[], None] | None = None,
    ) -> str:
        """Save to ``file_prefix`` exactly through the save pipeline; ``record`` and ``follow``
        (the state file's update) run where :func:`~trackpoint._saving.save.save_checkpoint`
        documents. ``write``, ``save`` and ``CheckpointManager.save`` all save through it."""
        options = CheckpointOptions.coerce(options)
        settings = SaveSettings(
            options.enable_async,
            tuple(options.experimental_write_callbacks or ()),
            options.experimental_sharding_callback,
            options.coordinator,
            options.experimental_io_device,
            options.incremental,
            options.async_writer == "process",
        )
        return save_checkpoint(
            os.fspath(file_prefix),
            self._tp_graph_root,
            self._tp_attached,
            settings,
            self._tp_saving,
            weak_root=isinstance(self._tp_root, weakref.ref),
            before_write=self._tp_before_write,
            record=record,
            follow=follow,
        )

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

        Examples:
            >>> import tempfile
            >>> import trackpoint as tp
            >>> path = tp.Checkpoint(w=tp.Variable(1.0)).write(tempfile.mkdtemp() + "/weights")
            >>> path.endswith("/weights")
            True
        """
        use_storage_options(file_prefix, storage_options)
        return self._save(file_prefix, options)

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

        Examples:
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

        return self._save(path, options, record=state_file_record(directory, path))

    def sync(self) -> None:
        """Wait until background saves finish; re-raise the failure of one (unlike TF, which only waits)."""
        self._tp_saving.settle()

    # -- restoring ----------------------------------------------------------------------

    def read(
        self,
        save_path: str | None,
        options: CheckpointOptions | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> Status:
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

        Examples:
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
    ) -> Status:
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
        if isinstance(coordinator, NameBasedRestore):
            status = NameBasedSaverStatus(coordinator, root, self._tp_attached)
            if with_counter:  # as TF: a TF1 checkpoint holds no save_counter
                status.add_to_optionally_restored(self.save_counter)
            return status
        return CheckpointLoadStatus(coordinator, root, self._tp_attached, listed_by)

    def restore(
        self,
        save_path: str | None,
        options: CheckpointOptions | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> Status:
        """Restore from a prefix (or a directory with a ``checkpoint`` file); values arrive now or on creation.

        As :meth:`read` does, it assigns the values of all existing objects or none. When
        ``save_path`` is a directory whose state file names a checkpoint elsewhere, the
        status's ``report().notes`` says where it was read from. A checkpoint without an
        object graph (TF1's ``Saver``) is restored by variable names, as TF does it, and
        returns a :class:`NameBasedSaverStatus`.

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

        Examples:
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

    def _restore_listed(self, prefix: str, directory: str, options: CheckpointOptions | None = None) -> Status:
        """:meth:`restore` ``prefix``, which the state file of ``directory`` named (for
        ``CheckpointManager.restore_or_initialize``): the report notes a prefix outside it."""
        return self._read(prefix, options, with_counter=True, listed_by=os.fspath(directory))
