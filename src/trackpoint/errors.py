"""The one exception tree of trackpoint.

::

    CheckpointError(Exception)                     root: catch this to catch them all
    ├── NotFoundError(CheckpointError, FileNotFoundError)
    │       a checkpoint, shard file or key that does not exist
    ├── PermissionDeniedError(CheckpointError, PermissionError)
    │       a checkpoint file this user may not read
    ├── DataLossError(CheckpointError, IOError)
    │       checksum mismatch, truncated or damaged file
    ├── InvalidArgumentError(CheckpointError, ValueError)
    │   │   malformed input: bad option, dtype/shape mismatch, hostile sizes
    │   ├── ShardingCallbackError(InvalidArgumentError, RuntimeError)
    │   │       a sharding callback's shards do not hold the checkpoint's tensors exactly
    │   └── InvalidCallbackError(InvalidArgumentError, TypeError, AssertionError)
    │           a write callback that is not callable, or takes more than the save path
    ├── WriteError(CheckpointError, OSError)
    │       a save, a state-file update or a repair could not be completed (disk full,
    │       permission denied, not a directory); the message says what is left on disk
    └── DeadReferenceError(CheckpointError, ReferenceError, AssertionError)
            the root of a ``Checkpoint(root=weakref.ref(obj))`` was garbage-collected

Each leaf also subclasses the builtin a caller would naturally catch, so
``except FileNotFoundError`` or ``except ValueError`` keeps working. Messages name the
file, the key and what to do about it.

Example:
    >>> import trackpoint as tp
    >>> try:
    ...     tp.load_checkpoint("/nonexistent/ckpt")
    ... except tp.errors.NotFoundError as exc:
    ...     print(type(exc).__name__)
    NotFoundError
"""

from __future__ import annotations

__all__ = ["CheckpointError", "DataLossError", "DeadReferenceError", "InvalidArgumentError",
           "InvalidCallbackError", "NotFoundError", "PermissionDeniedError", "ShardingCallbackError", "WriteError"]


class CheckpointError(Exception):
    """Root of every error trackpoint raises on purpose."""

    def __str__(self) -> str:
        # OSError subclasses format a single argument without quotes; keep that for all.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class NotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint, one of its files, or a requested key does not exist."""


class PermissionDeniedError(CheckpointError, PermissionError):
    """A checkpoint's ``.index``, ``.data-*`` or ``checkpoint`` file exists but may not be read.

    Raised when opening the file fails with ``EACCES`` or ``EPERM``; the message names the
    file. Also a ``PermissionError``, what ``open`` raises for the same file.
    """


class DataLossError(CheckpointError, IOError):
    """Stored bytes are damaged: a checksum mismatch, a truncated or unreadable file."""


class InvalidArgumentError(CheckpointError, ValueError):
    """Input is malformed or inconsistent: wrong dtype or shape, impossible sizes, bad options."""


class ShardingCallbackError(InvalidArgumentError, RuntimeError):
    """A sharding callback dropped, added, repeated or altered a tensor.

    Also a ``RuntimeError``, which is what TensorFlow raises for the same mistakes, so code
    written against TF's ``validate_shards`` keeps catching it.
    """


class InvalidCallbackError(InvalidArgumentError, TypeError, AssertionError):
    """A write callback cannot be called with the save path.

    Also a ``TypeError`` (a call of the wrong shape) and an ``AssertionError``, which is what
    TensorFlow's ``CheckpointOptions`` raises for the same callback.
    """


class WriteError(CheckpointError, OSError):
    """A save failed part way; the message says what is left on disk.

    Usually nothing of the save was published and earlier checkpoints are untouched. The
    exceptions say so: a checkpoint written whose state file could not be updated, or an
    overwrite whose previous version could not be put back (it is then kept whole beside
    the prefix, and trackpoint reads it).
    """


class DeadReferenceError(CheckpointError, ReferenceError, AssertionError):
    """An object a checkpoint held only by a weak reference was garbage-collected.

    ``tp.Checkpoint(root=weakref.ref(obj))`` keeps ``obj`` alive no more than TensorFlow
    does; once it is gone, saving or restoring raises this. It is also an
    ``AssertionError``, which is what TensorFlow raises then.
    """
