"""Reading checkpoints without the object graph: TF's ``tf.train.load_checkpoint`` family.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> _ = tp.save_tensors(prefix, {"w": np.ones((2, 3), np.float32)})
    >>> reader = tp.load_checkpoint(prefix)
    >>> reader.get_variable_to_shape_map()
    {'w': [2, 3]}
    >>> tp.list_variables(prefix)
    [('w', [2, 3])]
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from trackpoint._format.bundle_reader import BundleReader, Entry
from trackpoint._format.dtypes import enum_name
from trackpoint._format.entries import slice_keys
from trackpoint._format.keys import encode_key
from trackpoint._format.state_file import CheckpointState, read_state, resolve_index
from trackpoint._saving.save import run_write_callbacks
from trackpoint._saving.write import write_bundle
from trackpoint._storage import files, naming
from trackpoint._storage.storage_options import use_storage_options
from trackpoint._verify import Damage, repair_checkpoint, verify_checkpoint
from trackpoint.errors import InvalidArgumentError
from trackpoint.options import CheckpointOptions

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11; never imported at run time

__all__ = [
    "CheckpointReader",
    "CheckpointState",
    "Damage",
    "get_checkpoint_state",
    "latest_checkpoint",
    "list_variables",
    "load_checkpoint",
    "load_variable",
    "repair_checkpoint",
    "save_tensors",
    "verify_checkpoint",
]

_log = logging.getLogger("trackpoint")


class CheckpointReader:
    """Lazy access to the tensors of one checkpoint, like TF's ``CheckpointReader``.

    Opening reads only the ``.index``; each :meth:`get_tensor` reads and checksums one tensor.

    Args:
        prefix: The checkpoint prefix: a local path or an fsspec URL.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept for every URL beside ``prefix`` (its parent; never above the
            bucket), as ``tp.set_storage_options`` keeps them for a prefix.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = tp.save_tensors(prefix, {"step": np.int64(7), "name": b"run-1"})
        >>> with tp.load_checkpoint(prefix) as reader:
        ...     print(reader.get_tensor("step"), reader.get_tensor("name"), reader.has_tensor("x"))
        7 b'run-1' False
    """

    def __init__(self, prefix: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
        use_storage_options(prefix, storage_options)
        self._open(prefix, BundleReader(prefix))

    @classmethod
    def _resolved(cls, ckpt_dir_or_file: str) -> CheckpointReader:
        """The reader of a prefix or directory, resolved with no second request for a URL's index."""
        prefix, index = resolve_index(ckpt_dir_or_file)
        reader = cls.__new__(cls)
        reader._open(prefix, BundleReader(prefix, index=index))
        return reader

    def _open(self, prefix: str, bundle: BundleReader) -> None:
        self._bundle = bundle
        self._prefix = prefix
        self._visible: dict[str, Entry] | None = None

    @property
    def prefix(self) -> str:
        """The checkpoint prefix this reader opened."""
        return self._prefix

    def _entries(self) -> dict[str, Entry]:
        """``{key: entry}`` of the keys TF lists: every entry except slices that some full entry refers to."""
        if self._visible is None:
            entries = self._bundle.entries()
            hidden = slice_keys(entries)
            self._visible = {e.key: e for e in entries if encode_key(e.key) not in hidden}
        return self._visible

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        """``{key: shape as a list of ints}``, the object graph and sliced tensors (whole) included."""
        return {key: list(entry.shape) for key, entry in self._entries().items()}

    def get_variable_to_dtype_map(self) -> dict[str, np.dtype]:
        """``{key: numpy dtype}``; strings are ``object``, bfloat16 is ``ml_dtypes.bfloat16``."""
        return {
            key: entry.dtype.numpy if entry.dtype is not None else np.dtype("V0")
            for key, entry in self._entries().items()
        }

    def has_tensor(self, name: str | bytes) -> bool:
        """Whether ``name`` (``str``, or ``bytes`` as TF takes too) is a key of the checkpoint (exact match)."""
        return _checked_name(name) in self._bundle

    def get_tensor(self, name: str | bytes, out: np.ndarray | None = None) -> np.ndarray | np.generic | bytes:
        """Read one tensor, checksums verified.

        Args:
            name: The checkpoint key, ``str`` (or ``bytes``, as TF takes too).
            out: Optional destination array of the stored dtype and shape; the tensor is
                read straight into it (no intermediate buffer) and it is returned.

        Returns:
            A numpy array; a numpy scalar for a scalar; ``bytes`` for a scalar string; an
            object array of ``bytes`` for a string tensor.

        Raises:
            NotFoundError: No such key (``Key <name> not found in checkpoint``).
            DataLossError: The stored bytes are damaged.
            InvalidArgumentError: ``name`` is neither ``str`` nor ``bytes``.
        """
        value = self._bundle.read(_checked_name(name), out)
        if out is None and isinstance(value, np.ndarray) and value.ndim == 0:
            return value[()]
        return value

    def verify(self, progress: Callable[[int, int], None] | None = None) -> list[Damage]:
        """Check every index block, tensor and checksum of this checkpoint; see :func:`verify_checkpoint`."""
        return verify_checkpoint(self._prefix, progress)

    def debug_string(self) -> bytes:
        """One ``key (DT_NAME) [d0,d1]`` line per entry in key order, as TF's reader prints."""
        lines = []
        for entry in self._bundle.entries():
            if entry.is_sliced:
                continue
            shape = ",".join(str(d) for d in entry.shape)
            lines.append(encode_key(entry.key) + f" ({enum_name(entry.dtype_enum)}) [{shape}]\n".encode())
        return b"".join(lines)

    def close(self) -> None:
        """Close the data files (also done when the reader is garbage-collected)."""
        self._bundle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checked_name(name: object) -> str | bytes:
    """``name`` if it can be a checkpoint key (TF's reader takes ``str`` and ``bytes``)."""
    if not isinstance(name, (str, bytes)):
        raise InvalidArgumentError(
            f"tensor name {name!r} is of type {type(name).__name__}; pass the checkpoint key as a str, e.g. "
            "'model/w/.ATTRIBUTES/VARIABLE_VALUE'"
        )
    return name


def get_checkpoint_state(
    checkpoint_dir: str, *, storage_options: Mapping[str, Any] | None = None
) -> CheckpointState | None:
    """The parsed ``<checkpoint_dir>/checkpoint`` file, paths made absolute; None if absent.

    Args:
        checkpoint_dir: The directory: a local path or an fsspec URL.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for every URL under ``checkpoint_dir`` (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Examples:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> tp.get_checkpoint_state(tempfile.mkdtemp()) is None
        True

    Raises:
        InvalidArgumentError: The state file is garbage or names no checkpoint, or bad
            ``storage_options`` (not a mapping with ``str`` keys, or for a local path).
    """
    use_storage_options(checkpoint_dir, storage_options, directory=True)
    return read_state(checkpoint_dir)


def latest_checkpoint(checkpoint_dir: str, *, storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The newest checkpoint prefix named by the state file, if its ``.index`` exists.

    Args:
        checkpoint_dir: The directory: a local path or an fsspec URL.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for every URL under ``checkpoint_dir``, so the
            prefix returned is read with them too (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Examples:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> tp.latest_checkpoint(tempfile.mkdtemp()) is None
        True
    """
    use_storage_options(checkpoint_dir, storage_options, directory=True)
    state = read_state(checkpoint_dir)
    if state is None:
        return None
    path = state.model_checkpoint_path
    if files.exists(naming.index_filename(path)):
        return path
    _log.error("Couldn't match files for checkpoint %s named by %s/checkpoint", path, checkpoint_dir)
    return None


def load_checkpoint(ckpt_dir_or_file: str, *, storage_options: Mapping[str, Any] | None = None) -> CheckpointReader:
    """Open a checkpoint by prefix, or the latest one of a directory with a ``checkpoint`` file.

    Args:
        ckpt_dir_or_file: A checkpoint prefix or a directory: a local path or an fsspec URL.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for the URLs beside it (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = tp.save_tensors(prefix, {"a": np.zeros(2)})
        >>> tp.load_checkpoint(prefix).get_tensor("a")
        array([0., 0.])

    Raises:
        NotFoundError: Nothing is there.
        InvalidArgumentError: Bad ``storage_options`` (not a mapping with ``str`` keys, or for a
            local path).
    """
    use_storage_options(ckpt_dir_or_file, storage_options)
    return CheckpointReader._resolved(ckpt_dir_or_file)


def list_variables(
    ckpt_dir_or_file: str, *, storage_options: Mapping[str, Any] | None = None
) -> list[tuple[str, list[int]]]:
    """``[(key, shape)]`` sorted by key, as ``tf.train.list_variables`` returns.

    Args:
        ckpt_dir_or_file: A checkpoint prefix or a directory: a local path or an fsspec URL.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for the URLs beside it (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = tp.save_tensors(prefix, {"b": np.zeros(2), "a": np.zeros((1, 2))})
        >>> tp.list_variables(prefix)
        [('a', [1, 2]), ('b', [2])]
    """
    with load_checkpoint(ckpt_dir_or_file, storage_options=storage_options) as reader:
        return sorted(reader.get_variable_to_shape_map().items())


def load_variable(
    ckpt_dir_or_file: str, name: str, *, storage_options: Mapping[str, Any] | None = None
) -> np.ndarray | np.generic | bytes:
    """One tensor's value; a trailing ``":0"`` on the name is ignored, as in TF.

    Args:
        ckpt_dir_or_file: A checkpoint prefix or a directory: a local path or an fsspec URL.
        name: The tensor's key.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for the URLs beside it (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = tp.save_tensors(prefix, {"w": np.arange(3)})
        >>> tp.load_variable(prefix, "w:0")
        array([0, 1, 2])
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"variable name {name!r} is of type {type(name).__name__}; pass it as a str")
    name = name.removesuffix(":0")
    with load_checkpoint(ckpt_dir_or_file, storage_options=storage_options) as reader:
        return reader.get_tensor(name)


def save_tensors(
    file_prefix: str,
    tensors: dict[str, object],
    options: CheckpointOptions | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Write a plain bundle (no object graph) of ``{key: array}``, in the dict's order.

    Arrays may be any numpy dtype TF checkpoints hold, ``bytes``/``str`` scalars, or object
    arrays of ``bytes``. TF reads the result with ``tf.train.load_checkpoint``. The write is
    atomic and durable like every save.

    Args:
        file_prefix: The checkpoint prefix; ``.index`` and ``.data-00000-of-00001`` are added.
        tensors: Keys and values; data is written in this order, the index sorted.
        options: ``experimental_sharding_callback`` and ``experimental_write_callbacks`` apply;
            a plain bundle is always written synchronously, so ``enable_async`` is refused.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for the URLs beside the files (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Returns:
        ``file_prefix``.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> prefix = os.path.join(tempfile.mkdtemp(), "plain")
        >>> tp.save_tensors(prefix, {"x": np.float16(1.5)})
        '...plain'
    """
    use_storage_options(file_prefix, storage_options)
    options = CheckpointOptions.coerce(options)
    if options.enable_async:
        raise InvalidArgumentError("save_tensors writes synchronously; use tp.Checkpoint for async saves")
    _check_keys(tensors)
    prefix = write_bundle(os.fspath(file_prefix), list(tensors.items()), options.experimental_sharding_callback)
    run_write_callbacks(options.experimental_write_callbacks or (), prefix)
    return prefix


def _check_keys(tensors: object) -> None:
    """Raise unless ``tensors`` maps non-empty ``str`` keys, each storable as UTF-8, to values."""
    if not isinstance(tensors, Mapping):
        raise InvalidArgumentError(f"save_tensors takes a mapping {{key: array}}, not a {type(tensors).__name__}")
    for key in tensors:
        if isinstance(key, str) and key:
            try:
                encode_key(key)
                continue
            except UnicodeEncodeError:
                problem = "cannot be stored as UTF-8 (it holds a lone surrogate)"
        elif isinstance(key, str):
            problem = "is empty, which the index reserves for its header; name the tensor"
        elif isinstance(key, bytes):
            problem = "is bytes; decode it first, e.g. key.decode()"
        else:
            problem = f"is of type {type(key).__name__}; name the tensor with a str"
        raise InvalidArgumentError(f"save_tensors: key {key!r} {problem} (checkpoint keys are non-empty str)")
