"""``jax.distributed`` as the engine of a multi-process save: its coordination service carries the messages.

``jax.distributed.initialize`` connects every process to a key-value store kept by process 0's
coordination service; nothing here opens a connection of its own, and no collective runs, so
a save on a background thread never races the training step's computations. JAX is imported
only when this module is.

JAX itself ends every process of the job once one stops sending heartbeats for
``heartbeat_timeout_seconds`` (an argument of ``jax.distributed.initialize``, 100 s by default):
a coordinator timeout below half of that raises :class:`tp.errors.CoordinationError` in the
processes that live, while they still can act on it (half: a process that dies just after its
last "alive" beat is given the timeout once more, see ``StoreCoordinator``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from jax.errors import JaxRuntimeError

from trackpoint.distributed._coordinator import StoreCoordinator
from trackpoint.errors import CoordinationError, InvalidArgumentError

__all__ = ["DEFAULT_TIMEOUT", "JaxCoordinator", "JaxStore", "default_coordinator"]

#: Seconds a process waits for another before it gives up: twice this (the longest wait for a
#: process that died while writing) is below JAX's own 100 s heartbeat timeout, so that a save
#: raises before JAX ends the process (see the module docstring).
DEFAULT_TIMEOUT = 45.0


def _client() -> Any:
    """The initialized ``jax.distributed`` client, or None."""
    from jax._src import distributed  # where jax.distributed keeps its state (Orbax reads it there too)

    return distributed.global_state.client


class JaxStore:
    """The ``jax.distributed`` key-value store as a :class:`~trackpoint.distributed.KeyValueStore`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def set(self, key: str, value: bytes) -> None:
        try:
            self._client.key_value_set_bytes(key, value, allow_overwrite=True)
        except JaxRuntimeError as exc:
            raise CoordinationError(f"the jax.distributed coordination service is unreachable ({exc})") from exc

    def wait_get(self, key: str, timeout: float) -> bytes | None:
        try:
            if timeout <= 0:
                return bytes(self._client.key_value_try_get_bytes(key))
            return bytes(self._client.blocking_key_value_get_bytes(key, max(1, int(timeout * 1000))))
        except JaxRuntimeError as exc:
            text = str(exc)
            if text.startswith(("NOT_FOUND", "DEADLINE_EXCEEDED")):
                return None
            raise CoordinationError(f"the jax.distributed coordination service is unreachable ({exc})") from exc

    def delete(self, key: str) -> None:
        with contextlib.suppress(JaxRuntimeError):  # a key left behind: a few bytes in the service
            self._client.key_value_delete(key)


class JaxCoordinator(StoreCoordinator):
    """The processes of a ``jax.distributed`` job, coordinated through its key-value store.

    A save in a process of an initialized job of two or more processes uses one made with the
    defaults; give one in ``CheckpointOptions(coordinator=...)`` for another timeout.

    Args:
        timeout: Seconds to wait for another process before every process's save raises
            :class:`tp.errors.CoordinationError`; it must be longer than the slowest process's
            part of a save, and below half JAX's ``heartbeat_timeout_seconds`` to raise before JAX
            ends the job.

    Raises:
        InvalidArgumentError: ``jax.distributed`` is not initialized.

    Example (in each process, after ``jax.distributed.initialize``):
        >>> import trackpoint as tp, trackpoint.jax as tpj                          # doctest: +SKIP
        >>> from trackpoint.distributed import JaxCoordinator                      # doctest: +SKIP
        >>> options = tp.CheckpointOptions(coordinator=JaxCoordinator(timeout=30))  # doctest: +SKIP
        >>> tpj.Checkpoint(params=params).save("run/ckpt", options=options)        # doctest: +SKIP
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        import jax

        client = _client()
        if client is None:
            raise InvalidArgumentError(
                "jax.distributed is not initialized: call jax.distributed.initialize in every process first"
            )
        rank, world_size = jax.process_index(), jax.process_count()
        # Every process makes its coordinators in the same order, so the n-th one of each gets the
        # same number: the keys of this one never meet those of an earlier one.
        number = client.key_value_increment(f"trackpoint/made/{rank}", 1)
        super().__init__(JaxStore(client), rank, world_size, timeout, f"trackpoint/j{number}")


_default: list[tuple[Any, JaxCoordinator]] = []


def default_coordinator() -> JaxCoordinator | None:
    """A coordinator of the ``jax.distributed`` job when one of several processes is initialized, else None.

    Made once per job (per client), so that every save of a process uses the same one.
    """
    client = _client()
    if client is None:
        return None
    import jax

    if jax.process_count() < 2:
        return None
    if _default and _default[0][0] is client:
        return _default[0][1]
    coordinator = JaxCoordinator()
    _default[:] = [(client, coordinator)]
    return coordinator
