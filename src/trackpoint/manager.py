"""``tp.CheckpointManager``: numbered saves, retention, and the ``checkpoint`` state file."""

from __future__ import annotations

import collections
import os
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from trackpoint._format.state_file import (
    STATE_FILENAME,
    SWAP_ATTEMPTS,
    CheckpointState,
    read_state_versioned,
    require_swappable,
    swap_pause,
    write_state,
)
from trackpoint._graph import kept_values
from trackpoint._saving.interval import Interval, as_int
from trackpoint._storage import files, naming, pending_writes
from trackpoint._storage.storage import storage_for
from trackpoint._storage.storage_options import use_storage_options
from trackpoint.checkpoint import Checkpoint
from trackpoint.errors import CheckpointError, InvalidArgumentError, WriteError
from trackpoint.options import CheckpointOptions
from trackpoint.reader import get_checkpoint_state

__all__ = ["CheckpointManager"]


def _delete(path: str) -> None:
    """Delete the checkpoint ``path`` and what an interrupted overwrite of it left, the index first
    (a reader never finds an index whose data is gone)."""
    kept_values.keep_values_of(path)  # values a restore of it still waits to hand out
    storage_for(path).delete(path)


class CheckpointManager:
    """Keep the last ``max_to_keep`` checkpoints of a :class:`Checkpoint` in ``directory``.

    The state file it writes (paths relative to the directory, save timestamps,
    ``last_preserved_timestamp``) is the one ``tf.train.CheckpointManager`` writes and reads,
    so either can pick up where the other left off.

    Args:
        checkpoint: The :class:`Checkpoint` to save and restore.
        directory: Where checkpoints and the ``checkpoint`` file live.
        max_to_keep: How many recent checkpoints to keep; None keeps all.
        keep_checkpoint_every_n_hours: Additionally keep one checkpoint per this many hours.
        checkpoint_name: Prefix of the files (``<name>-<number>``).
        step_counter: A variable (or int-like) read when ``checkpoint_interval`` is set.
        checkpoint_interval: Save only when the step advanced at least this much.
        init_fn: Called by :meth:`restore_or_initialize` when there is nothing to restore.
        last_checkpoint_step: The step of the last checkpoint saved, from which
            ``checkpoint_interval`` is counted: the first ``save()`` is skipped unless the
            step moved on from it by at least the interval (or, with ``check_interval=False``,
            at all). None, the default, lets the first ``save()`` through. Used only with
            ``checkpoint_interval``, as in TF; :meth:`restore_or_initialize` replaces it with
            the restored step.
        storage_options: For a URL ``directory``, options of its fsspec filesystem
            (``endpoint_url``, ``key``, ``secret``...), kept process-wide for the directory and
            every URL in it, as ``tp.set_storage_options(directory, ...)`` keeps them: the
            manager's saves (background ones too) and restores, and any other reader of the
            checkpoints in it, use them. The latest options given for a directory replace
            earlier ones. Local directories take none.

    Raises:
        InvalidArgumentError: A bad argument: a checkpoint that is not a :class:`Checkpoint`,
            a non-positive ``max_to_keep``, ``storage_options`` that are not a mapping with
            ``str`` keys or are given for a local directory.

    Examples:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> ckpt = tp.Checkpoint(step=tp.Variable(0))
        >>> manager = tp.CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=2)
        >>> paths = [manager.save() for _ in range(3)]
        >>> [p.rsplit("/", 1)[1] for p in manager.checkpoints]
        ['ckpt-2', 'ckpt-3']
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: str,
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: float | None = None,
        checkpoint_name: str = "ckpt",
        step_counter: Any = None,
        checkpoint_interval: int | None = None,
        init_fn: Callable[[], Any] | None = None,
        last_checkpoint_step: Any = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        # For the directory itself, not for its parent as for a path that may be a prefix:
        # everything the manager reads and writes is in it, and the parent's registration would
        # reach the directory's siblings (other runs) and replace options a user set for it.
        use_storage_options(directory, storage_options, directory=True)
        if not isinstance(checkpoint, Checkpoint):
            raise InvalidArgumentError(f"CheckpointManager needs a tp.Checkpoint, got {type(checkpoint).__name__}")
        if max_to_keep is not None and max_to_keep <= 0:
            raise InvalidArgumentError(f"max_to_keep must be positive or None, got {max_to_keep}")
        self._interval = Interval(step_counter, checkpoint_interval, last_checkpoint_step)
        self._checkpoint = checkpoint
        self._storage = storage_for(os.fspath(directory))
        self._directory = self._storage.directory(os.fspath(directory))
        require_swappable(self._directory)  # before anything is saved that could not be recorded
        self._max_to_keep = max_to_keep
        self._keep_every_n_hours = keep_checkpoint_every_n_hours
        self._prefix = os.path.join(self._directory, checkpoint_name)
        self._init_fn = init_fn
        self._maybe_delete: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._latest_checkpoint: str | None = None
        self._last_preserved_timestamp = 0.0
        self._load_state(warn_clock=True)

    def _load_state(self, warn_clock: bool = False) -> None:
        """Take the list, the latest checkpoint and the timestamps from the state file on disk.

        Entries outside the directory are left out of the list (so never deleted), with a
        warning; a latest checkpoint outside it stays readable, as in TF.
        """
        now = time.time()
        state = get_checkpoint_state(self._directory)
        self._maybe_delete.clear()
        if state is None:
            self._latest_checkpoint = None
            self._last_preserved_timestamp = now - 1
            return
        self._latest_checkpoint = state.model_checkpoint_path
        self._last_preserved_timestamp = state.last_preserved_timestamp
        if now < self._last_preserved_timestamp:
            # A clock set back, or a state file from a machine whose clock runs ahead: as TF
            # does, say so and count keep_checkpoint_every_n_hours from now.
            if warn_clock:
                warnings.warn(
                    f"time.time() returned a value {self._last_preserved_timestamp - now:f} seconds behind the last "
                    f"preserved checkpoint timestamp (last_preserved_timestamp in {self._state_path}). The manager "
                    "uses the current time instead, so keep_checkpoint_every_n_hours counts from now; check the "
                    "system clock if this is unexpected.",
                    UserWarning,
                    stacklevel=3,
                )
            self._last_preserved_timestamp = now
        timestamps = state.all_model_checkpoint_timestamps or (self._last_preserved_timestamp,) * len(
            state.all_model_checkpoint_paths
        )
        outside = []
        for path, stamp in zip(state.all_model_checkpoint_paths, timestamps):
            if not self._owns(path):
                outside.append(path)
                continue
            stamp = min(stamp, now)
            if stamp > self._last_preserved_timestamp:
                self._maybe_delete[path] = stamp
        if outside:
            warnings.warn(
                f"{self._state_path}: the state file lists {len(outside)} checkpoint(s) outside {self._directory} "
                f"({', '.join(repr(p) for p in outside[:3])}{', ...' if len(outside) > 3 else ''}). The manager "
                "keeps them out of its list and never deletes them; restore them by path if they are wanted.",
                UserWarning,
                stacklevel=3,
            )
        if not self._owns(state.model_checkpoint_path):
            warnings.warn(
                f"{self._state_path}: the latest checkpoint it names, {state.model_checkpoint_path!r}, is outside "
                f"{self._directory}; restore_or_initialize() reads it from there, as TF does.",
                UserWarning,
                stacklevel=3,
            )

    @property
    def _state_path(self) -> str:
        return os.path.join(self._directory, STATE_FILENAME)

    def _owns(self, path: str) -> bool:
        """Whether ``path`` is a checkpoint prefix directly inside the directory, by real paths:
        no ``..``, absolute path or symlinked subdirectory leads a deletion elsewhere."""
        name = os.path.basename(path)
        if not name or name == STATE_FILENAME:
            return False
        return self._storage.directly_in(self._directory, path)

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    @property
    def checkpoint_interval(self) -> int | None:
        return self._interval.every

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint prefix, or None.

        Unlike TF's, which lags behind an async save until it completes, this waits for a save
        of this process in flight to the directory, so it never names the checkpoint before it.
        """
        pending_writes.wait_for(self._directory)
        return self._latest_checkpoint

    @property
    def checkpoints(self) -> list[str]:
        """Kept checkpoints, oldest first (those preserved by ``keep_checkpoint_every_n_hours`` excluded);
        as :attr:`latest_checkpoint`, after a save in flight completes."""
        pending_writes.wait_for(self._directory)
        return list(self._maybe_delete)

    def _record_state(self) -> None:
        if self._latest_checkpoint is None:
            return
        write_state(
            self._directory,
            self._latest_checkpoint,
            list(self._maybe_delete),
            list(self._maybe_delete.values()),
            self._last_preserved_timestamp,
        )

    def _doomed(self) -> list[str]:
        """Take the checkpoints beyond ``max_to_keep`` off the list (those kept by
        ``keep_checkpoint_every_n_hours`` move the preserved timestamp); return the ones to delete."""
        doomed: list[str] = []
        while self._max_to_keep and len(self._maybe_delete) > self._max_to_keep:
            path, stamp = self._maybe_delete.popitem(last=False)
            if self._keep_every_n_hours and stamp - self._keep_every_n_hours * 3600.0 >= self._last_preserved_timestamp:
                self._last_preserved_timestamp = stamp
                continue
            doomed.append(path)
        return doomed

    def _sweep(self) -> None:
        for path in self._doomed():
            _delete(path)

    def _merge(self, theirs: CheckpointState | None, path: str, stamp: float) -> None:
        """Take in what another manager recorded since this one read the state object.

        A checkpoint listed on one side only was added or deleted by one of them: it stays
        if its index exists. The latest is the newest by timestamp, as the list is ordered.
        """
        ours = collections.OrderedDict(self._maybe_delete)
        ours.pop(path, None)
        ours[path] = stamp
        listed: dict[str, float] = {}
        if theirs is not None:
            self._last_preserved_timestamp = max(self._last_preserved_timestamp, theirs.last_preserved_timestamp)
            stamps = theirs.all_model_checkpoint_timestamps or (theirs.last_preserved_timestamp,) * len(
                theirs.all_model_checkpoint_paths
            )
            listed = {p: t for p, t in zip(theirs.all_model_checkpoint_paths, stamps) if self._owns(p)}
        merged = {}
        for name in ours.keys() | listed.keys():
            if name == path or (name in ours and name in listed) or files.exists(naming.index_filename(name)):
                merged[name] = ours.get(name, listed.get(name, stamp))
        self._maybe_delete = collections.OrderedDict(sorted(merged.items(), key=lambda item: (item[1], item[0])))
        self._latest_checkpoint = next(reversed(self._maybe_delete))

    def _swap_state(self, path: str) -> list[str]:
        """Record ``path`` in the state object at a URL by compare-and-swap; return what to delete.

        Each attempt reads the object and its version, merges another manager's changes,
        and writes only if the version is unchanged, so no manager's update is lost. The
        checkpoints beyond ``max_to_keep`` are deleted by the caller once the object no longer
        names them: the state never names a checkpoint being deleted.
        """
        stamp = time.time()
        for attempt in range(SWAP_ATTEMPTS):
            theirs, version = read_state_versioned(self._directory)
            self._merge(theirs, path, stamp)
            doomed = self._doomed()
            assert self._latest_checkpoint is not None  # _merge named one
            if write_state(
                self._directory,
                self._latest_checkpoint,
                list(self._maybe_delete),
                list(self._maybe_delete.values()),
                self._last_preserved_timestamp,
                version=version,
            ):
                return doomed
            swap_pause(attempt)
        raise WriteError(
            f"{self._state_path} changed under every one of {SWAP_ATTEMPTS} attempts to record {path} (other "
            "managers are saving to this directory without pause)"
        )

    def save(
        self, checkpoint_number: Any = None, check_interval: bool = True, options: CheckpointOptions | None = None
    ) -> str | None:
        """Save a numbered checkpoint, update the state file, delete what is no longer kept.

        Returns:
            The new prefix, or None when ``checkpoint_interval`` says it is too early.
        """
        if not self._interval.due(check_interval):
            return None
        count = self._checkpoint._count_save(self._prefix if checkpoint_number is None else None)
        number = count if checkpoint_number is None else as_int(checkpoint_number)
        path = f"{self._prefix}-{number}"

        def record_remote() -> None:
            # The state object is swapped, never renamed; then what it no longer names is
            # deleted, and what killed writers left is cleared (see object_bundles).
            before = (collections.OrderedDict(self._maybe_delete), self._latest_checkpoint)
            try:
                doomed = self._swap_state(path)
            except OSError as exc:
                raise self._unrecorded(path, before, exc) from exc
            for old in doomed:
                _delete(old)
            self._storage.remove_orphans(self._directory, keep=list(self._maybe_delete))

        def record_and_sweep() -> None:
            # After the files are complete (on the writer thread for async saves), so the list
            # and the state file never name a half-written checkpoint.
            before = (collections.OrderedDict(self._maybe_delete), self._latest_checkpoint)
            self._maybe_delete.pop(path, None)
            self._maybe_delete[path] = time.time()
            self._latest_checkpoint = path
            try:
                self._record_state()
            except OSError as exc:
                raise self._unrecorded(path, before, exc) from exc
            self._sweep()
            try:
                self._record_state()
            except OSError as exc:
                self._load_state()
                raise WriteError(
                    f"checkpoint {path} is saved and recorded, but the state file {self._state_path} could not be "
                    f"updated after older checkpoints were deleted ({exc}); it still lists them, and the manager "
                    "deletes them again at its next save. Free space or fix permissions and save again."
                ) from exc

        # On the other ranks of a save of several processes, the committing rank's state file
        # is what the manager lists once the save is committed.
        return self._checkpoint._save(
            path,
            options,
            record=record_remote if self._storage.merges_state else record_and_sweep,
            follow=self._load_state,
        )

    def _unrecorded(
        self, path: str, before: tuple[collections.OrderedDict[str, float], str | None], exc: OSError
    ) -> WriteError:
        """The state file could not name the new checkpoint: go back to what the file says, and
        remove the checkpoint if nothing names it (the manager could never sweep it)."""
        try:
            self._load_state()
        except (OSError, CheckpointError):  # the file cannot be read back either: as before this save
            self._maybe_delete, self._latest_checkpoint = before
        if path in self._maybe_delete or path == self._latest_checkpoint:
            what = f"{path} was written, and the state file still names it as before"
        else:
            _delete(path)
            what = f"{path} was written but could not be recorded, so it was removed"
        return WriteError(
            f"could not update the state file {self._state_path} ({exc}): {what}; the manager's checkpoints are "
            f"those the file lists, latest {self._latest_checkpoint}. Free space or fix permissions and save again."
        )

    def restore_or_initialize(self) -> str | None:
        """Restore the latest checkpoint and return its path, or run ``init_fn`` and return None."""
        pending_writes.wait_for(self._directory)
        if self._latest_checkpoint is not None:
            # As restore(), noting in the report a latest checkpoint outside the directory.
            self._checkpoint._restore_listed(self._latest_checkpoint, self._directory)
            self._interval.restored()
            return self._latest_checkpoint
        if self._init_fn is not None:
            self._init_fn()
        return None

    def sync(self) -> None:
        """Wait for the checkpoint's pending saves."""
        self._checkpoint.sync()
