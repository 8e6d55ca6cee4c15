"""The one exception tree of trackpoint.

::

    CheckpointError(Exception)                     root: catch this to catch them all
    ├── NotFoundError(CheckpointError, FileNotFoundError)
    │       a checkpoint, shard file or key that does not exist
    ├── PermissionDeniedError(CheckpointError, PermissionError)
    │       a checkpoint file this user may not read; an object store refusing the credentials
    ├── DataLossError(CheckpointError, OSError)
    │       checksum mismatch, truncated or damaged file
    ├── DeadlineExceededError(CheckpointError, TimeoutError)
    │       an object store did not answer within the client's timeout, after the retries
    │       its client is configured with
    ├── UnavailableError(CheckpointError, ConnectionError)
    │       an object store's endpoint could not be connected to (refused: nothing listens
    │       there; or not found), after the retries its client is configured with
    ├── InvalidArgumentError(CheckpointError, ValueError)
    │   │   malformed input: bad option, dtype/shape mismatch, hostile sizes
    │   ├── ShardingCallbackError(InvalidArgumentError, RuntimeError)
    │   │       a sharding callback's shards do not hold the checkpoint's tensors exactly
    │   └── InvalidCallbackError(InvalidArgumentError, TypeError, AssertionError)
    │           a write callback that is not callable, or takes more than the save path
    ├── WriteError(CheckpointError, OSError)
    │   │   a save, a state-file update or a repair could not be completed (disk full,
    │   │   permission denied, not a directory); the message says what is left on disk
    │   └── CoordinationError(WriteError)
    │           a save of several processes failed on another rank, or a rank did not
    │           answer in time; the message names the rank and its error
    └── DeadReferenceError(CheckpointError, ReferenceError, AssertionError)
            the root of a ``Checkpoint(root=weakref.ref(obj))`` was garbage-collected

Each leaf also subclasses the builtin a caller would naturally catch, so
``except FileNotFoundError`` or ``except ValueError`` keeps working. Messages name the
file, the key and what to do about it.

Six leaves are ``OSError`` subclasses: ``NotFoundError``, ``PermissionDeniedError``,
``WriteError`` (with its kind ``CoordinationError``), ``DataLossError``,
``DeadlineExceededError`` (a ``TimeoutError``) and ``UnavailableError`` (a
``ConnectionError``). That is deliberate (a damaged or truncated file is a
failed read, which Python reports as an ``OSError``), but it means that ``except OSError``
also catches a checksum failure: catch ``DataLossError`` first when the two need different
handling.

Every error takes, besides its message, two optional keyword arguments that callers may
read instead of parsing the message: ``path``, the file or checkpoint prefix concerned, and
``key``, the checkpoint key concerned. Either is None when the error does not know it. They
are not ``OSError.filename``, which would change how the message prints.

Examples:
    >>> import trackpoint as tp
    >>> try:
    ...     tp.load_checkpoint("/nonexistent/ckpt")
    ... except tp.errors.NotFoundError as exc:
    ...     print(type(exc).__name__)
    NotFoundError
    >>> error = tp.errors.DataLossError("run/ckpt-1.index: checksum mismatch", path="run/ckpt-1.index", key="w")
    >>> error.path, error.key, str(error)
    ('run/ckpt-1.index', 'w', 'run/ckpt-1.index: checksum mismatch')
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "CoordinationError",
    "DataLossError",
    "DeadReferenceError",
    "DeadlineExceededError",
    "InvalidArgumentError",
    "InvalidCallbackError",
    "NotFoundError",
    "PermissionDeniedError",
    "ShardingCallbackError",
    "UnavailableError",
    "WriteError",
]


# -- the root -----------------------------------------------------------------------------


class CheckpointError(Exception):
    """Root of every error trackpoint raises on purpose.

    Args:
        *args: The message (the builtin parents' other forms, such as ``OSError``'s
            ``(errno, strerror)``, are passed on unchanged).
        path: The file or checkpoint prefix the error is about, when known.
        key: The checkpoint key the error is about, when known.

    Examples:
        >>> import trackpoint as tp
        >>> error = tp.errors.NotFoundError("no checkpoint at run/ckpt-9", path="run/ckpt-9")
        >>> isinstance(error, FileNotFoundError), error.path, error.key
        (True, 'run/ckpt-9', None)
    """

    path: str | None
    key: str | None

    def __init__(self, *args: object, path: str | None = None, key: str | None = None) -> None:
        # Stored in the instance's __dict__, which pickle and copy carry along with args.
        super().__init__(*args)
        self.path = path
        self.key = key


# -- a checkpoint's files -----------------------------------------------------------------


class NotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint, one of its files, or a requested key does not exist."""


class PermissionDeniedError(CheckpointError, PermissionError):
    """A checkpoint's ``.index``, ``.data-*`` or ``checkpoint`` file exists but may not be read.

    Raised when opening the file fails with ``EACCES`` or ``EPERM``; the message names the
    file. Also a ``PermissionError``, what ``open`` raises for the same file. At a URL, raised
    for any request the store refuses (credentials it does not accept, or no right to read,
    list or write there), on a save too; the message names the URL and the credentials to check.
    """


class DataLossError(CheckpointError, OSError):
    """Stored bytes are damaged: a checksum mismatch, a truncated or unreadable file.

    An ``OSError``, so ``except OSError`` catches it too (see the module docstring).
    """


class DeadlineExceededError(CheckpointError, TimeoutError):
    """An object store did not answer a request in time: a stall, not an absence or damage.

    Raised once the client's own retry policy (s3fs's ``retries`` and botocore's
    ``config_kwargs={"retries": ...}``, as the storage options set them) has given up on a
    request that timed out; trackpoint adds no retries of its own. The message names the URL
    and the remedy: check the endpoint, or raise ``read_timeout``. Named as TensorFlow's
    ``tf.errors.DeadlineExceededError``; also a ``TimeoutError`` (an ``OSError``).

    Examples:
        >>> import trackpoint as tp
        >>> error = tp.errors.DeadlineExceededError("s3://b/run/ckpt-1.index: no answer", path="s3://b/run/ckpt-1.index")
        >>> isinstance(error, TimeoutError), error.path
        (True, 's3://b/run/ckpt-1.index')
    """


class UnavailableError(CheckpointError, ConnectionError):
    """An object store's endpoint could not be connected to: refused, or its name not found.

    Raised once the client's own retry policy (botocore's ``config_kwargs={"retries": ...}``,
    as the storage options set it) has given up on a request that never reached the store, on
    a read or a save; trackpoint adds no retries of its own. Nothing is wrong with the
    checkpoint. The message names the URL, the endpoint and the remedy: check the endpoint the
    URL uses (``endpoint_url``) and that the server there is running and reachable. Named as
    TensorFlow's ``tf.errors.UnavailableError``; also a ``ConnectionError`` (an ``OSError``).

    Examples:
        >>> import trackpoint as tp
        >>> error = tp.errors.UnavailableError("s3://b/run/ckpt-1.index: connection refused", path="s3://b/run")
        >>> isinstance(error, ConnectionError), error.path
        (True, 's3://b/run')
    """


class WriteError(CheckpointError, OSError):
    """A save failed part way; the message says what is left on disk.

    Usually nothing of the save was published and earlier checkpoints are untouched. The
    exceptions say so: a checkpoint written whose state file could not be updated, or an
    overwrite whose previous version could not be put back (it is then kept whole beside
    the prefix, and trackpoint reads it).
    """


class CoordinationError(WriteError):
    """A save of several processes failed on another rank, or a rank did not answer in time."""


# -- the caller's arguments ---------------------------------------------------------------


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


# -- the objects being checkpointed -------------------------------------------------------


class DeadReferenceError(CheckpointError, ReferenceError, AssertionError):
    """An object a checkpoint held only by a weak reference was garbage-collected.

    ``tp.Checkpoint(root=weakref.ref(obj))`` keeps ``obj`` alive no more than TensorFlow
    does; once it is gone, saving or restoring raises this. It is also an
    ``AssertionError``, which is what TensorFlow raises then.
    """
