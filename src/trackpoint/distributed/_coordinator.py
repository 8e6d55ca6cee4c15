"""The coordination a multi-process save needs, as a small protocol over a key-value store.

A save of several processes exchanges a few messages: every rank's plan to one rank, the
decision back to all, every rank's written entries to the committing rank, its verdict back.
:class:`Coordinator` is that protocol (gather, broadcast, barrier, key-value set and wait);
:class:`StoreCoordinator` builds it on any store that can set a key and wait for one, such as
torch.distributed's c10d store (see :mod:`._torch`). A store needs no collective calls, so a
background writer thread can use it while the training loop goes on with its own.

Messages carry a status: a rank that fails sends its failure instead of its message, so the
others raise at once rather than wait. A rank that dies sends nothing: the others give up
after ``timeout`` seconds, naming it. A failure anyone reported is also posted under a key of
its own, which every wait looks at, so a rank waiting for someone else learns of it too.
Each rank also posts that it arrived at a save as it starts it, so a rank that gives up can
name the ranks that never came (the one it waited for may itself be waiting for them).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from trackpoint.errors import CoordinationError

__all__ = ["Coordinator", "KeyValueStore", "StoreCoordinator"]

_OK, _FAILED = b"\x00", b"\x01"
_POLL = 0.2  # seconds between looks at the failure key while waiting
_NAMED = 8  # missing ranks a timeout names (a job of thousands may lose many at once)


@runtime_checkable
class KeyValueStore(Protocol):
    """What an engine must offer: a shared store of byte values (torch's c10d ``Store``, ...)."""

    def set(self, key: str, value: bytes) -> None:
        """Publish ``value`` under ``key`` to every process."""
        ...

    def wait_get(self, key: str, timeout: float) -> bytes | None:
        """The value of ``key`` once it is set, or None if it is not set within ``timeout`` seconds."""
        ...

    def delete(self, key: str) -> None:
        """Drop ``key`` (absent or not)."""
        ...


@runtime_checkable
class Coordinator(Protocol):
    """The processes of one job, as a save sees them.

    Attributes:
        rank: This process's number, ``0 <= rank < world_size``.
        world_size: How many processes save together.
        timeout: Seconds to wait for another rank before giving up on it.
    """

    rank: int
    world_size: int
    timeout: float

    def new_tag(self) -> str:
        """A fresh name for one save; every rank gets the same names in the same order.

        The save's exchanges are named ``f"{tag}#{phase}"``; a failure :meth:`fail` posts under
        any of them reaches every wait of the save.
        """
        ...

    def gather(self, tag: str, value: bytes, root: int = 0) -> list[bytes] | None:
        """Every rank's ``value`` at ``root`` (in rank order), None elsewhere."""
        ...

    def all_gather(self, tag: str, value: bytes) -> list[bytes]:
        """Every rank's ``value`` at every rank."""
        ...

    def broadcast(self, tag: str, value: bytes | None, root: int = 0) -> bytes:
        """``root``'s ``value`` at every rank."""
        ...

    def fail(self, tag: str, message: str) -> None:
        """Tell every rank that this exchange failed here, and why."""
        ...

    def barrier(self, tag: str) -> None:
        """Return once every rank has called it."""
        ...

    def release(self, tag: str) -> None:
        """Every rank has read what was sent under ``tag``: drop it from the store (called by one rank)."""
        ...

    def alive(self, tag: str) -> contextlib.AbstractContextManager[None]:
        """A context inside which the others of save ``tag`` know this rank lives while it works."""
        ...


class StoreCoordinator:
    """:class:`Coordinator` over a :class:`KeyValueStore` (one key per rank and message).

    A wait for another rank raises :class:`CoordinationError` once ``timeout`` seconds pass
    with no answer (plus one poll, 0.2 s), naming the ranks that never arrived at the save if
    any, else the rank waited for; a rank inside :meth:`alive` is waited for while it says it
    lives, so one that dies there is noticed within about twice ``timeout``.

    Args:
        store: The shared store.
        rank: This process's rank.
        world_size: The number of ranks.
        timeout: Seconds to wait for another rank before raising :class:`CoordinationError`.
        namespace: Prefix of every key, so that several coordinators share one store.
    """

    def __init__(self, store: KeyValueStore, rank: int, world_size: int, timeout: float, namespace: str) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.timeout = float(timeout)
        self._namespace = namespace
        self._count = 0

    def new_tag(self) -> str:
        """A fresh name for one save, posting that this rank arrived at it (see :meth:`_late`)."""
        self._count += 1
        tag = f"{self._namespace}/{self._count}"
        self.store.set(_arrived_key(tag, self.rank), b"")
        return tag

    # -- messages ---------------------------------------------------------------------------

    def _put(self, key: str, value: bytes) -> None:
        self.store.set(key, _OK + value)

    def fail(self, tag: str, message: str) -> None:
        text = f"rank {self.rank}: {message}".encode("utf-8", "backslashreplace")
        self.store.set(_failure_key(tag), _FAILED + text)

    @contextlib.contextmanager
    def alive(self, tag: str) -> Iterator[None]:
        """While inside, tell the others of save ``tag`` that this rank lives (it may be busy writing).

        A rank waiting for this one gives up only once this one stopped saying so for
        ``timeout`` seconds: the timeout bounds how long a dead rank goes unnoticed, not how
        long a rank may take to write its part.
        """
        key, stop = _alive_key(tag, self.rank), threading.Event()

        def tick() -> None:
            beat = 0
            while True:
                beat += 1
                with contextlib.suppress(CoordinationError):
                    self.store.set(key, str(beat).encode())
                if stop.wait(self.timeout / 4):
                    return

        ticker = threading.Thread(target=tick, name="trackpoint-alive", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()

    def _take(self, tag: str, key: str, sender: int) -> bytes:
        """The value ``sender`` put under ``key``; raise if it, or anyone, failed or it is too late."""
        failure_key = _failure_key(tag)
        deadline = time.monotonic() + self.timeout
        beat: bytes | None = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                latest = self.store.wait_get(_alive_key(tag, sender), 0.0)
                if latest is not None and latest != beat:  # busy, not dead: wait on
                    beat, deadline = latest, time.monotonic() + self.timeout
                    left = self.timeout
            value = self.store.wait_get(key, min(_POLL, max(left, 0.0)))
            if value is not None:
                if value[:1] == _FAILED:
                    raise CoordinationError(value[1:].decode("utf-8", "replace"))
                return value[1:]
            failed = self.store.wait_get(failure_key, 0.0)
            if failed is not None:
                raise CoordinationError(failed[1:].decode("utf-8", "replace"))
            if left <= 0:
                raise self._late(tag, sender)

    def _late(self, tag: str, sender: int) -> CoordinationError:
        """The error of a wait for ``sender`` that timed out: it names the ranks that never
        arrived at save ``tag`` if there are any (``sender`` may be waiting for them, as the
        root of a gather does), else ``sender``.

        Each rank's arrival is looked up once, without waiting: this runs only when a save has
        already failed.
        """
        others = [r for r in range(self.world_size) if r != self.rank]
        missing = [r for r in others if self.store.wait_get(_arrived_key(tag, r), 0.0) is None]
        if missing:
            names = ", ".join(str(r) for r in missing[:_NAMED]) + (", ..." if len(missing) > _NAMED else "")
            if len(missing) == 1:
                which, why = f"rank {names}", "it exited, hangs, or never called it"
            else:
                which, why = f"ranks {names} ({len(missing)} of them)", "they exited, hang, or never called it"
            return CoordinationError(
                f"{which} did not arrive at this save within {self.timeout:g} s ({why}): every rank must call the "
                "same save, and the timeout must cover the slowest rank's way to it"
            )
        return CoordinationError(
            f"rank {sender} did not answer within {self.timeout:g} s (it died, hangs, or does not save "
            "with the others: every rank must call the same save)"
        )

    def gather(self, tag: str, value: bytes, root: int = 0) -> list[bytes] | None:
        self._put(f"{tag}/g/{self.rank}", value)
        if self.rank != root:
            return None
        values = []
        for r in range(self.world_size):
            if r == root:
                values.append(value)
                continue
            values.append(self._take(tag, f"{tag}/g/{r}", r))
            self.store.delete(f"{tag}/g/{r}")  # read by the root alone: a save's largest messages
        self.store.delete(f"{tag}/g/{root}")
        return values

    def all_gather(self, tag: str, value: bytes) -> list[bytes]:
        self._put(f"{tag}/a/{self.rank}", value)
        return [value if r == self.rank else self._take(tag, f"{tag}/a/{r}", r) for r in range(self.world_size)]

    def broadcast(self, tag: str, value: bytes | None, root: int = 0) -> bytes:
        if self.rank == root:
            if value is None:
                raise ValueError("the root of a broadcast must give a value")
            self._put(f"{tag}/b", value)
            return value
        return self._take(tag, f"{tag}/b", root)

    def barrier(self, tag: str) -> None:
        self.all_gather(tag, b"")

    def release(self, tag: str) -> None:
        self.store.delete(f"{tag}/b")
        for r in range(self.world_size):
            self.store.delete(f"{tag}/a/{r}")


def _failure_key(tag: str) -> str:
    """Where a failure of any exchange of one save is posted: under the save's own tag."""
    return f"{tag.partition('#')[0]}/failed"


def _arrived_key(tag: str, rank: int) -> str:
    """Set once by ``rank`` as it starts save ``tag``."""
    return f"{tag.partition('#')[0]}/arrived/{rank}"


def _alive_key(tag: str, rank: int) -> str:
    return f"{tag.partition('#')[0]}/alive/{rank}"
