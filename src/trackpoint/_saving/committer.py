"""The committer seam: who writes a save's tensors and what makes the checkpoint exist.

A save (:func:`trackpoint._saving.save.save_checkpoint`) asks a :class:`Committer` to plan
it, then hands the plan, a :class:`Commit`, the tensors to write. One process saving alone
uses :data:`trackpoint._saving.save.ALONE`: it writes the bundle, and the index renamed into
place is the commit. A
save of several processes plugs in here: a package that coordinates processes registers a
resolver (:func:`register_resolver`) which, from the ``coordinator`` option and the task
that ``experimental_io_device`` names, returns its own committer or None (then this process
saves alone). ``trackpoint.distributed`` registers one when it is imported; ``import
trackpoint`` names it with :func:`load_on_first_need` instead of importing it, and the first
save that a plug-in could claim imports it (a save with ``coordinator=False``, or with the
default ``None`` in a process that never imported torch.distributed, imports nothing).

Examples:
    >>> committer_for(False, None) is None  # coordinator=False: this process saves alone
    True
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from trackpoint._saving.device_spec import parse_device
from trackpoint._saving.sharding_policies import ShardingCallback

__all__ = ["Commit", "Committer", "Resolver", "Tensors", "committer_for", "load_on_first_need", "register_resolver"]

Tensors = Sequence[tuple[str, Any]]


class Commit(Protocol):
    """One save as its committer planned it.

    A class attribute ``records = True`` or ``False`` implements :attr:`records`.
    """

    @property
    def records(self) -> bool:
        """Whether :meth:`write` runs ``record`` itself, at its commit point (a save of several
        processes: the committing process records before the others learn that the checkpoint
        exists, and they run ``follow`` once they have). When False the pipeline runs
        ``record`` after the write callbacks, as TF appends the state file's update to them."""
        ...

    def write(
        self,
        tensors: Tensors,
        owners: Sequence[Any],
        sharding: ShardingCallback | None,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> None:
        """Write the files and commit the checkpoint (on the writer thread for async saves).

        Args:
            tensors: Every ``(key, value)`` of the save, the object graph last.
            owners: The object of each tensor (None for the graph), for ``sharding``.
            sharding: Splits tensors over data files; None writes one.
            record: See :attr:`records`.
            follow: See :attr:`records`.

        Raises:
            WriteError: Nothing was committed unless the message says so.
        """
        ...


class Committer(Protocol):
    """Plans a save's writes and commit."""

    def plan(self, prefix: str, tensors: Callable[[], Tensors], settle: Callable[[], None]) -> Commit:
        """Plan the save of ``prefix``, on the calling thread, before the save returns.

        Args:
            prefix: The checkpoint being saved.
            tensors: Encodes and returns the save's tensors, for a committer that needs
                them to plan (an async save otherwise encodes them on its writer thread).
            settle: Waits for the checkpoint's background write and re-raises its failure;
                a committer whose plan exchanges messages with other processes calls it
                first, so that the processes' exchanges pair up in save order.
        """
        ...


Resolver = Callable[[Any, "int | None"], "Committer | None"]
"""``(coordinator option, the task experimental_io_device names) ->`` a committer, or None to save alone."""

_resolvers: list[Resolver] = []
_ENGINES = frozenset({"torch.distributed", "jax"})  # modules whose import may make a default group
_plug_ins: list[str] = []  # modules that register a resolver once imported, not imported yet
_importing = threading.Lock()


def register_resolver(resolver: Resolver) -> None:
    """Offer ``resolver`` every later save's options (once; asked in registration order)."""
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def load_on_first_need(module: str) -> None:
    """Name ``module``, which registers a resolver when imported, for the first save that may need it."""
    if module not in _plug_ins:
        _plug_ins.append(module)


def committer_for(coordinator: Any, io_device: str | None) -> Committer | None:
    """The committer of a save with these options: the first a resolver returns, else None
    (the process saves alone: :data:`trackpoint._saving.save.ALONE`).

    Raises:
        Whatever a resolver raises for options it cannot serve (a bad process group, say).
    """
    if coordinator is False:  # this process saves alone, whatever runs
        return None
    # A coordinator given, or the default (None): torch.distributed's default group or a
    # jax.distributed job, which exist only once torch.distributed or jax is imported (see
    # CheckpointOptions.coordinator).
    if _plug_ins and (coordinator is not None or not _ENGINES.isdisjoint(sys.modules)):
        with _importing:  # two threads' first saves at once: each plug-in is imported and struck once
            for module in list(_plug_ins):
                importlib.import_module(module)
                _plug_ins.remove(module)
    io_task = parse_device(io_device).task if io_device is not None else None
    for resolver in _resolvers:
        committer = resolver(coordinator, io_task)
        if committer is not None:
            return committer
    return None
