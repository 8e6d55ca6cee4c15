"""The ``checkpoint`` state file: a text-format ``CheckpointState`` naming recent checkpoints."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf import text_format

from trackpoint._format._proto import checkpoint_state_pb2 as pb
from trackpoint._storage import files, naming, pending_writes
from trackpoint._storage.storage import storage_for
from trackpoint.errors import InvalidArgumentError, NotFoundError, WriteError

__all__ = [
    "STATE_FILENAME",
    "SWAP_ATTEMPTS",
    "CheckpointState",
    "RepeatedField",
    "is_directory",
    "point_state_at",
    "read_state",
    "read_state_versioned",
    "require_swappable",
    "resolve_index",
    "resolve_prefix",
    "swap_pause",
    "write_state",
]

STATE_FILENAME = naming.STATE_FILENAME
_MAX_STATE_BYTES = 16 << 20
_T = TypeVar("_T")


class RepeatedField(tuple):  # of str or of float
    """A tuple that also equals a list of the same items, as a protobuf repeated field does.

    TF's ``get_checkpoint_state`` returns the protobuf message, whose repeated fields
    compare equal to lists; code written against it (``state.all_model_checkpoint_paths ==
    [...]``) keeps working. Unlike protobuf's, it equals a tuple too, and is hashable.

    Examples:
        >>> paths = RepeatedField(["ckpt-1", "ckpt-2"])
        >>> paths == ["ckpt-1", "ckpt-2"], paths == ("ckpt-1", "ckpt-2"), paths != ["ckpt-2"]
        (True, True, True)
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__


def _repeated(values: Iterable[Any]) -> RepeatedField:
    return values if type(values) is RepeatedField else RepeatedField(values)


@dataclass(frozen=True)
class CheckpointState:
    """What a ``checkpoint`` file says, with paths made absolute.

    Attributes:
        model_checkpoint_path: The latest checkpoint prefix.
        all_model_checkpoint_paths: Every kept checkpoint prefix, oldest first.
        all_model_checkpoint_timestamps: Save times (seconds since the epoch), parallel to the paths,
            or empty.
        last_preserved_timestamp: When ``keep_checkpoint_every_n_hours`` last kept one.
    """

    model_checkpoint_path: str
    all_model_checkpoint_paths: tuple[str, ...] = ()
    all_model_checkpoint_timestamps: tuple[float, ...] = ()
    last_preserved_timestamp: float = 0.0

    def __post_init__(self) -> None:
        # Repeated fields equal lists as well as tuples (see RepeatedField), however made.
        object.__setattr__(self, "all_model_checkpoint_paths", _repeated(self.all_model_checkpoint_paths))
        object.__setattr__(self, "all_model_checkpoint_timestamps", _repeated(self.all_model_checkpoint_timestamps))


def _state_path(directory: str) -> str:
    try:
        return os.path.join(os.fspath(directory), STATE_FILENAME)
    except TypeError as exc:
        raise InvalidArgumentError(f"{directory!r} is not a checkpoint directory path (pass a str)") from exc


def read_state(directory: str) -> CheckpointState | None:
    """Parse ``<directory>/checkpoint``; None when there is no such file.

    Raises:
        InvalidArgumentError: The file is not a valid text ``CheckpointState``, names no
            checkpoint, is not a regular file, or ``directory`` is no path; the message says
            which file.
        PermissionDeniedError: The file may not be read.
    """
    path = _state_path(directory)
    pending_writes.wait_for(directory)  # a save in flight here names its checkpoint once complete
    try:
        data, _ = files.read_regular(path, "checkpoint state file", _MAX_STATE_BYTES)
    except NotFoundError:
        return None
    return _parse(directory, path, data)


def read_state_versioned(directory: str) -> tuple[CheckpointState | None, str | None]:
    """:func:`read_state` and, at a URL, the version of the state object read (for :func:`write_state`).

    The version is None when there is no state file, and always None for a local directory,
    whose state file is replaced by a rename rather than swapped.
    """
    path = _state_path(directory)
    found = storage_for(path).read_versioned(path, "checkpoint state file", _MAX_STATE_BYTES)
    if found is None:
        return None, None
    return _parse(directory, path, found[0]), found[1]


def require_swappable(directory: str) -> None:
    """Before a save that records itself: refuse a URL whose store cannot swap the state object.

    Raises:
        InvalidArgumentError: The store has no conditional writes trackpoint uses (see
            :func:`trackpoint._storage.commit.swap`); the message names the alternative.
    """
    path = _state_path(directory)
    storage_for(path).require_swap(path)


def _parse(directory: str, path: str, data: bytes) -> CheckpointState:
    state = pb.CheckpointState()
    try:
        text_format.Parse(data.decode("utf-8"), state)
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(
            f"{path}: not a valid checkpoint state file ({exc}); delete it or pass a checkpoint prefix directly"
        ) from exc
    if not state.model_checkpoint_path:
        raise InvalidArgumentError(f"Invalid checkpoint state loaded from {directory}: {path} names no checkpoint")
    if state.all_model_checkpoint_timestamps and len(state.all_model_checkpoint_timestamps) != len(
        state.all_model_checkpoint_paths
    ):
        raise InvalidArgumentError(
            f"{path}: {len(state.all_model_checkpoint_paths)} paths but "
            f"{len(state.all_model_checkpoint_timestamps)} timestamps"
        )
    storage = storage_for(directory)
    return CheckpointState(
        model_checkpoint_path=storage.absolute(directory, state.model_checkpoint_path),
        all_model_checkpoint_paths=tuple(storage.absolute(directory, p) for p in state.all_model_checkpoint_paths),
        all_model_checkpoint_timestamps=tuple(state.all_model_checkpoint_timestamps),
        last_preserved_timestamp=state.last_preserved_timestamp,
    )


def resolve_prefix(ckpt_dir_or_file: str) -> str:
    """A checkpoint prefix from a prefix, or from a directory through its ``checkpoint`` file.

    Raises:
        NotFoundError: The directory has no state file, or the checkpoint it names is gone;
            the message says which and what to do.
        InvalidArgumentError: ``ckpt_dir_or_file`` is not a ``str`` (or ``os.PathLike``) path.
    """
    return _resolve(ckpt_dir_or_file, files.stat_path)[0]


def resolve_index(ckpt_dir_or_file: str) -> tuple[str, tuple[bytes, os.stat_result] | None]:
    """:func:`resolve_prefix`, and the bytes and stat of the prefix's index where it fetched
    them (at a URL, where a prefix is told from a directory by its index): a reader opening
    the index next makes no second request for it, and on S3 it took one in all."""
    return _resolve(ckpt_dir_or_file, _fetch_index)


def _fetch_index(index: str) -> tuple[bytes, os.stat_result]:
    return files.read_regular(index, "checkpoint index", naming.MAX_INDEX_BYTES)


def _resolve(ckpt_dir_or_file: str, look_up: Callable[[str], _T]) -> tuple[str, _T | None]:
    """The prefix, and what ``look_up`` of its index gave where the storage needed it to tell a
    prefix from a directory (see :meth:`trackpoint._storage.storage.Storage.find_prefix`)."""
    try:
        path = os.fspath(ckpt_dir_or_file)
    except TypeError:
        path = None
    if not isinstance(path, str) or "\x00" in path:
        raise InvalidArgumentError(
            f"{ckpt_dir_or_file!r} is not a checkpoint path: pass a prefix such as 'dir/ckpt-1', or a directory "
            "holding a 'checkpoint' file, as a str"
        )
    pending_writes.wait_for(path)  # a save in flight to this prefix or directory completes first
    is_prefix, index = storage_for(path).find_prefix(path, look_up)
    if is_prefix:
        return path, index
    state = read_state(path)
    if state is None and path.endswith(("/", os.sep)) and files.exists(naming.index_filename(path)):
        # A prefix that ends in a separator: its files are `<dir>/.index` and `<dir>/.data-...`
        # (a TF1 Saver given "model/"), and no state file says otherwise.
        return path, None
    if state is None:
        raise NotFoundError(
            f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}: pass a checkpoint "
            "prefix such as 'dir/ckpt-1', or a directory whose 'checkpoint' file names an existing checkpoint"
        )
    latest = state.model_checkpoint_path
    if not files.exists(naming.index_filename(latest)):
        others = [p for p in state.all_model_checkpoint_paths if files.exists(naming.index_filename(p))]
        hint = f"; complete ones it still lists: {others}" if others else ""
        raise NotFoundError(
            f"{os.path.join(path, STATE_FILENAME)} names {latest}, but {naming.index_filename(latest)} is missing: "
            f"the checkpoint was deleted or never completed. Pass an existing prefix{hint}, or remove the state file"
        )
    return latest, None


def is_directory(path: str) -> bool:
    """Whether ``path`` names a checkpoint directory rather than a prefix: a local directory, or
    a URL with a state object under it (object stores have no directories of their own)."""
    return not storage_for(path).find_prefix(path, files.stat_path)[0]


def write_state(
    directory: str,
    model_checkpoint_path: str,
    all_model_checkpoint_paths: Sequence[str] = (),
    all_model_checkpoint_timestamps: Sequence[float] = (),
    last_preserved_timestamp: float | None = None,
    version: str | None = None,
) -> bool:
    """Replace ``<directory>/checkpoint``: locally atomically (temp file, then rename); at a URL
    only if the state object is still ``version``, as :func:`read_state_versioned` gave it.

    ``model_checkpoint_path`` is appended to the list when it is not already last. Paths
    under ``directory`` are stored relative to it.

    Returns:
        True when written. False only at a URL, when another writer replaced (or created)
        the state object since ``version`` was read: read it again, merge, and write again.

    Raises:
        InvalidArgumentError: Timestamps not parallel to paths, or a checkpoint path equal to the
            state file's own path.
    """
    paths = list(all_model_checkpoint_paths)
    if not paths or paths[-1] != model_checkpoint_path:
        paths.append(model_checkpoint_path)
    if all_model_checkpoint_timestamps and len(all_model_checkpoint_timestamps) != len(paths):
        raise InvalidArgumentError(
            f"{directory}: {len(paths)} checkpoint paths but {len(all_model_checkpoint_timestamps)} timestamps"
        )
    state_path = os.path.join(directory, STATE_FILENAME)
    if os.path.abspath(model_checkpoint_path) == os.path.abspath(state_path):
        raise InvalidArgumentError(f"{state_path}: a checkpoint prefix cannot be the state file's own path")
    storage = storage_for(state_path)
    proto = pb.CheckpointState(
        model_checkpoint_path=storage.relative(directory, model_checkpoint_path),
        all_model_checkpoint_paths=[storage.relative(directory, p) for p in paths],
        all_model_checkpoint_timestamps=list(all_model_checkpoint_timestamps),
    )
    if last_preserved_timestamp is not None:
        proto.last_preserved_timestamp = last_preserved_timestamp
    data = text_format.MessageToString(proto).encode("utf-8")
    return storage.swap(state_path, data, version)


SWAP_ATTEMPTS = 20  # each failed swap re-reads, so only writers saving without pause exhaust them


def swap_pause(attempt: int) -> None:
    """Wait a random while after failed swap ``attempt``, longer each time, to fall out of step
    with the other writer."""
    time.sleep(random.uniform(0, 0.01 * 2 ** min(attempt, 6)))


def point_state_at(directory: str, path: str) -> None:
    """Make ``<directory>/checkpoint`` name ``path`` alone, as ``Checkpoint.save`` does.

    At a URL the state object is swapped against the version just read, and read again
    when another writer replaced it meanwhile.

    Raises:
        WriteError: Other writers replaced the state object under every attempt.
    """
    for attempt in range(SWAP_ATTEMPTS):
        _, version = read_state_versioned(directory)
        if write_state(directory, path, version=version):
            return
        swap_pause(attempt)
    raise WriteError(
        f"{_state_path(directory)} changed under every one of {SWAP_ATTEMPTS} attempts to name {path} (other "
        "writers are saving to this directory without pause)",
        path=_state_path(directory),
    )
