"""torch.distributed as the engine of a multi-process save: its c10d store carries the messages.

The store (the one ``init_process_group`` rendezvoused through, or one given) already
connects every process; nothing here opens a connection or runs a rendezvous of its own,
and no collective is called, so a save on a background thread never races the training
loop's collectives. torch is imported only when this module is.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch.distributed as dist

from trackpoint.distributed._coordinator import StoreCoordinator
from trackpoint.errors import CoordinationError, InvalidArgumentError

__all__ = ["DEFAULT_TIMEOUT", "TorchCoordinator", "TorchStore", "default_coordinator"]

#: Seconds a rank waits for another before it gives up (see ``TorchCoordinator``).
DEFAULT_TIMEOUT = 300.0


class TorchStore:
    """A c10d ``Store`` as a :class:`~trackpoint.distributed.KeyValueStore`."""

    def __init__(self, store: Any) -> None:
        # A connection of its own where the store can give one: a wait here then never
        # holds up the process group's own use of the store.
        if getattr(store, "has_extended_api", lambda: False)():
            try:
                store = store.clone()
            except (RuntimeError, NotImplementedError):
                pass
        self._store = store

    def set(self, key: str, value: bytes) -> None:
        try:
            self._store.set(key, value)
        except RuntimeError as exc:
            raise CoordinationError(f"the torch.distributed store is unreachable ({exc})") from exc

    def wait_get(self, key: str, timeout: float) -> bytes | None:
        try:
            if timeout <= 0:  # c10d reads a zero timeout as "wait for ever"
                if not self._store.check([key]):
                    return None
            else:
                self._store.wait([key], datetime.timedelta(seconds=timeout))
            return bytes(self._store.get(key))
        except RuntimeError as exc:  # DistStoreError is one; a FileStore raises a plain RuntimeError
            if "timeout" in str(exc).lower():
                return None
            raise CoordinationError(f"the torch.distributed store is unreachable ({exc})") from exc

    def delete(self, key: str) -> None:
        try:
            self._store.delete_key(key)
        except RuntimeError:
            pass  # a store that cannot delete keeps a few small keys per save


class TorchCoordinator(StoreCoordinator):
    """The ranks of a torch.distributed process group, coordinated through its store.

    Args:
        group: The process group (default: the default group, which must be initialized).
        store: The c10d store to use (default: the one the default group rendezvoused through).
        rank, world_size: This process's rank and the number of ranks, when ``store`` is given
            without an initialized process group.
        timeout: Seconds to wait for another rank before every rank's save raises
            :class:`tp.errors.CoordinationError`; it must be longer than the slowest rank's
            part of a save.

    Raises:
        InvalidArgumentError: torch.distributed is not initialized and no store was given.

    Example (in each of the processes ``torchrun`` starts):
        >>> import trackpoint as tp                                                 # doctest: +SKIP
        >>> from trackpoint.distributed import TorchCoordinator                      # doctest: +SKIP
        >>> options = tp.CheckpointOptions(coordinator=TorchCoordinator(timeout=60))  # doctest: +SKIP
        >>> tp.Checkpoint(model=model).save("run/ckpt", options=options)           # doctest: +SKIP
    """

    def __init__(
        self,
        group: Any = None,
        store: Any = None,
        timeout: float = DEFAULT_TIMEOUT,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if not dist.is_available():
            raise InvalidArgumentError("this torch build has no torch.distributed")
        if store is None:
            if not dist.is_initialized():
                raise InvalidArgumentError(
                    "torch.distributed is not initialized: call torch.distributed.init_process_group (torchrun "
                    "sets up its environment) or give TorchCoordinator a store"
                )
            store = dist.distributed_c10d._get_default_store()
        if rank is None or world_size is None:
            if not dist.is_initialized():
                raise InvalidArgumentError(
                    "TorchCoordinator with a store but no process group needs rank and world_size"
                )
            rank, world_size = dist.get_rank(group), dist.get_world_size(group)
        name = getattr(group, "group_name", None) or "default"
        kv = TorchStore(dist.PrefixStore(f"trackpoint/{name}", store))
        # Every rank makes its coordinators in the same order, so the n-th one of each rank
        # gets the same number: the keys of this one never meet those of an earlier one.
        number = int(kv._store.add(f"made/{rank}", 1))
        super().__init__(kv, rank, world_size, timeout, f"c{number}")
        self.group = group


_default: list[tuple[Any, TorchCoordinator]] = []


def default_coordinator() -> TorchCoordinator | None:
    """A coordinator of the default process group when one of several ranks is initialized, else None.

    Made once per default group, so that every save of a process uses the same one.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    group = dist.group.WORLD
    if _default and _default[0][0] is group:
        return _default[0][1]
    coordinator = TorchCoordinator()
    _default[:] = [(group, coordinator)]
    return coordinator
