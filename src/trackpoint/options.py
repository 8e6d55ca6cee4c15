"""``tp.CheckpointOptions``: TF's options for saving and restoring, all of them working."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trackpoint._saving.device_spec import parse_device
from trackpoint._saving.sharding_policies import ShardingCallback
from trackpoint.errors import InvalidArgumentError, InvalidCallbackError

__all__ = ["CheckpointOptions", "WriteCallback"]

WriteCallback = Callable[..., Any]


def _check_callback(callback: Any) -> None:
    if not callable(callback):
        raise InvalidCallbackError(f"experimental_write_callbacks must hold callables, got {callback!r}")
    try:
        params = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return  # a builtin without a signature: it will be called with the path
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(required) > 1 or any(p.kind == p.KEYWORD_ONLY for p in required):
        raise InvalidCallbackError(f"write callback {callback!r} must take no argument or one (the save path)")


#: The values of the ``async_writer`` option.
ASYNC_WRITERS = (None, "thread", "process")


def _checked(name: str, value: Any) -> Any:
    """``value`` as the option ``name`` stores it, or an error saying why it cannot be."""
    if name == "experimental_io_device":
        if value is not None:
            parse_device(value)
        return value
    if name in ("enable_async", "experimental_skip_slot_variables", "incremental"):
        return bool(value)
    if name == "experimental_write_callbacks":
        if value is None:
            return None
        if callable(value) or isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise InvalidCallbackError(f"experimental_write_callbacks must be a list of callables, got {value!r}")
        callbacks = list(value)  # the options' own list: the caller's may change later
        for callback in callbacks:
            _check_callback(callback)
        return callbacks
    if name == "experimental_sharding_callback":
        if value is not None and not isinstance(value, ShardingCallback):
            raise InvalidArgumentError(
                "The experimental_sharding_callback checkpoint option must be of type ShardingCallback "
                f"(tp.sharding), got {type(value).__name__}"
            )
        return value
    if name == "coordinator":
        if value is None or value is False or _is_coordinator(value):
            return value
        raise InvalidArgumentError(
            "The coordinator checkpoint option must be None (torch.distributed's default group or the "
            "jax.distributed job when one is initialized), False (this process saves alone), a torch.distributed process group or a "
            f"tp.distributed.Coordinator, got {type(value).__name__}"
        )
    if name == "async_writer":
        if value not in ASYNC_WRITERS:
            raise InvalidArgumentError(
                f'The async_writer checkpoint option must be None or "thread" (a thread of this process writes) or '
                f'"process" (a child process writes, so that the training loop keeps the GIL), got {value!r}'
            )
        return value
    return value  # not an option: __slots__ refuses it


def _is_coordinator(value: Any) -> bool:
    """A ``tp.distributed.Coordinator``, or a torch process group (recognised without importing torch)."""
    if all(hasattr(value, name) for name in ("rank", "world_size", "timeout", "gather", "broadcast", "new_tag")):
        return True
    return type(value).__module__.startswith("torch") and "ProcessGroup" in type(value).__name__


class CheckpointOptions:
    """Options for ``save``, ``write``, ``read``, ``restore`` and ``CheckpointManager.save``.

    Args:
        experimental_io_device: A TF device string (``"/job:localhost"``, ``"CPU:0"``, …) naming
            where file I/O runs. In one process every device is local, so it does not change
            the bytes written; it matters only once saving spans processes. Malformed strings
            raise ``InvalidArgumentError`` (a ``ValueError``), as ``tf.DeviceSpec`` would.
        experimental_enable_async_checkpoint: Deprecated alias of ``enable_async``.
        experimental_write_callbacks: Callables taking no argument or the save path, run in
            order once the files are complete (on the writer thread for async saves).
        enable_async: ``save``/``write`` return once the state is snapshotted; one background
            thread writes. Unlike TF, ``sync()`` re-raises a background failure, and
            ``save_counter`` is the checkpoint's own (TF uses a hidden second counter).
        experimental_skip_slot_variables: On restore, leave optimizer slot variables alone and
            do not require them in the status assertions.
        experimental_sharding_callback: A :class:`tp.sharding.ShardingCallback` deciding how
            tensors are split over data files (default: one file).
        coordinator: For a save of several processes (see :mod:`trackpoint.distributed`):
            a torch.distributed process group or a ``tp.distributed.Coordinator``. None (the
            default) uses torch.distributed's default group when it is initialized with two
            or more ranks, else the ``jax.distributed`` job of two or more processes when
            one is initialized; ``False`` makes this process save alone.
        incremental: Not in TF. A save writes only what changed since this checkpoint's
            previous incremental save: a data file whose tensors all hash the same (xxh3-128)
            is hard-linked from it (copied where links are not supported); large tensors get
            files of their own and the tensors that stopped changing share one. Every
            checkpoint stays a complete bundle that TF reads, and deleting an older one never
            touches a newer. On S3 such a data object is copied by the server, not uploaded;
            other stores get the whole bundle. For one process; not with
            ``experimental_sharding_callback``.
        async_writer: Not in TF. Who writes an ``enable_async`` save: None or ``"thread"``, a
            thread of this process; ``"process"``, a child process shared by this process's
            checkpoints (Linux), from a copy of the state in shared memory and around the page
            cache, so that the training process keeps its GIL and its core; the writers run on
            the CPUs other than the one ``save()`` was called on. It holds one more
            copy of the state from the first such save on. It applies to a process saving alone
            at a local path with no sharding callback, and is ignored otherwise.

    Every attribute is checked when it is assigned, after construction too, so a bad value
    raises where it is set rather than in a later save.

    Examples:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> written = []
        >>> options = tp.CheckpointOptions(enable_async=True, experimental_write_callbacks=[written.append])
        >>> ckpt = tp.Checkpoint(w=tp.Variable([1.0, 2.0]))
        >>> path = ckpt.save(tempfile.mkdtemp() + "/ckpt", options=options)  # returns once snapshotted
        >>> ckpt.sync()  # waits for the background write and its callbacks; re-raises their failure
        >>> written == [path]
        True
        >>> options.experimental_sharding_callback = tp.sharding.MaxShardSizePolicy(1 << 20)
        >>> options.experimental_sharding_callback = "one file per tensor"
        Traceback (most recent call last):
        ...
        trackpoint.errors.InvalidArgumentError: The experimental_sharding_callback checkpoint option must be ...
    """

    __slots__ = (  # noqa: RUF023 - TF's order, which repr() follows
        "experimental_io_device",
        "enable_async",
        "experimental_write_callbacks",
        "experimental_skip_slot_variables",
        "experimental_sharding_callback",
        "coordinator",
        "incremental",
        "async_writer",
    )

    def __init__(
        self,
        experimental_io_device: str | None = None,
        experimental_enable_async_checkpoint: bool = False,
        experimental_write_callbacks: Sequence[WriteCallback] | None = None,
        enable_async: bool = False,
        experimental_skip_slot_variables: bool = False,
        experimental_sharding_callback: ShardingCallback | None = None,
        coordinator: Any = None,
        incremental: bool = False,
        async_writer: str | None = None,
    ) -> None:
        if experimental_enable_async_checkpoint:
            warnings.warn(
                "experimental_enable_async_checkpoint is deprecated; use enable_async=True",
                DeprecationWarning,
                stacklevel=2,
            )
        # Each assignment is checked by __setattr__.
        self.experimental_io_device = experimental_io_device
        self.enable_async = enable_async or experimental_enable_async_checkpoint
        self.experimental_write_callbacks = experimental_write_callbacks
        self.experimental_skip_slot_variables = experimental_skip_slot_variables
        self.experimental_sharding_callback = experimental_sharding_callback
        self.coordinator = coordinator
        self.incremental = incremental
        self.async_writer = async_writer

    def __setattr__(self, name: str, value: Any) -> None:
        # Checked here rather than only in __init__: the attributes are TF's public, mutable
        # fields, and a bad value set later would otherwise fail only inside a save.
        object.__setattr__(self, name, _checked(name, value))

    @property
    def experimental_enable_async_checkpoint(self) -> bool:
        """Deprecated alias of ``enable_async``."""
        return self.enable_async

    def __copy__(self) -> CheckpointOptions:
        clone = CheckpointOptions.__new__(CheckpointOptions)
        for name in self.__slots__:
            object.__setattr__(clone, name, getattr(self, name))
        if self.experimental_write_callbacks is not None:  # a copy's list is its own, as in TF
            object.__setattr__(clone, "experimental_write_callbacks", list(self.experimental_write_callbacks))
        return clone

    @classmethod
    def coerce(cls, options: CheckpointOptions | None) -> CheckpointOptions:
        """``options``, or the defaults for None; anything else is an error."""
        if options is None:
            return cls()
        if not isinstance(options, CheckpointOptions):
            raise InvalidArgumentError(f"options must be a tp.CheckpointOptions, got {type(options).__name__}")
        return options

    def __repr__(self) -> str:
        fields = []
        for name in self.__slots__:
            value = getattr(self, name)
            if value not in (None, False):
                fields.append(f"{name}={value!r}")
        return f"CheckpointOptions({', '.join(fields)})"
