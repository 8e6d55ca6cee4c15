"""The ``checkpoint`` state file: a text-format ``CheckpointState`` naming recent checkpoints."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import text_format

from trackpoint._format import atomic, files, naming
from trackpoint._format._proto import checkpoint_state_pb2 as pb
from trackpoint.errors import InvalidArgumentError, NotFoundError

__all__ = ["STATE_FILENAME", "CheckpointState", "RepeatedField", "read_state", "resolve_prefix", "write_state"]

STATE_FILENAME = "checkpoint"
_MAX_STATE_BYTES = 16 << 20


class RepeatedField(tuple):  # of str or of float
    """A tuple that also equals a list of the same items, as a protobuf repeated field does.

    TF's ``get_checkpoint_state`` returns the protobuf message, whose repeated fields
    compare equal to lists; code written against it (``state.all_model_checkpoint_paths ==
    [...]``) keeps working. Unlike protobuf's, it equals a tuple too, and is hashable.

    Example:
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


def _absolute(directory: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(directory, path)


def read_state(directory: str) -> CheckpointState | None:
    """Parse ``<directory>/checkpoint``; None when there is no such file.

    Raises:
        InvalidArgumentError: The file is not a valid text ``CheckpointState``, names no
            checkpoint, is not a regular file, or ``directory`` is no path; the message says
            which file.
        PermissionDeniedError: The file may not be read.
    """
    try:
        path = os.path.join(os.fspath(directory), STATE_FILENAME)
    except TypeError as exc:
        raise InvalidArgumentError(f"{directory!r} is not a checkpoint directory path (pass a str)") from exc
    try:
        data, _ = files.read_regular(path, "checkpoint state file", _MAX_STATE_BYTES)
    except NotFoundError:
        return None
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
    return CheckpointState(
        model_checkpoint_path=_absolute(directory, state.model_checkpoint_path),
        all_model_checkpoint_paths=tuple(_absolute(directory, p) for p in state.all_model_checkpoint_paths),
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
    try:
        path = os.fspath(ckpt_dir_or_file)
    except TypeError:
        path = None
    if not isinstance(path, str) or "\x00" in path:
        raise InvalidArgumentError(
            f"{ckpt_dir_or_file!r} is not a checkpoint path: pass a prefix such as 'dir/ckpt-1', or a directory "
            "holding a 'checkpoint' file, as a str"
        )
    if not os.path.isdir(path):
        return path
    state = read_state(path)
    if state is None:
        raise NotFoundError(
            f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}: pass a checkpoint "
            "prefix such as 'dir/ckpt-1', or a directory whose 'checkpoint' file names an existing checkpoint"
        )
    latest = state.model_checkpoint_path
    if not os.path.exists(naming.index_filename(latest)):
        others = [p for p in state.all_model_checkpoint_paths if os.path.exists(naming.index_filename(p))]
        hint = f"; complete ones it still lists: {others}" if others else ""
        raise NotFoundError(
            f"{os.path.join(path, STATE_FILENAME)} names {latest}, but {naming.index_filename(latest)} is missing: "
            f"the checkpoint was deleted or never completed. Pass an existing prefix{hint}, or remove the state file"
        )
    return latest


def _relative(directory: str, path: str) -> str:
    """Paths inside ``directory`` relative to it (TF's ``save_relative_paths=True``), others absolute.

    Unlike TF, a relative path given from the working directory is re-based on ``directory``
    rather than stored as is (which would point to the wrong place when read back).
    """
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(directory))
    return os.path.abspath(path) if rel.startswith(os.pardir) else rel


def write_state(
    directory: str,
    model_checkpoint_path: str,
    all_model_checkpoint_paths: Sequence[str] = (),
    all_model_checkpoint_timestamps: Sequence[float] = (),
    last_preserved_timestamp: float | None = None,
) -> None:
    """Atomically replace ``<directory>/checkpoint`` (temp file, then rename).

    ``model_checkpoint_path`` is appended to the list when it is not already last. Paths
    under ``directory`` are stored relative to it.

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
    proto = pb.CheckpointState(
        model_checkpoint_path=_relative(directory, model_checkpoint_path),
        all_model_checkpoint_paths=[_relative(directory, p) for p in paths],
        all_model_checkpoint_timestamps=list(all_model_checkpoint_timestamps),
    )
    if last_preserved_timestamp is not None:
        proto.last_preserved_timestamp = last_preserved_timestamp
    atomic.write_file(state_path, text_format.MessageToString(proto).encode("utf-8"))
