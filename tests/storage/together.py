"""Saves of several managers at once, for the state-object races of the object-store tests."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import trackpoint as tp


def save_together(managers: Sequence[tp.CheckpointManager], rounds: int) -> None:
    """Each manager saves ``rounds`` times on its own thread, all starting each round together;
    the first failure of any is raised here."""
    barrier = threading.Barrier(len(managers), timeout=60)
    errors: list[BaseException] = []

    def saves(manager: tp.CheckpointManager) -> None:
        try:
            for _ in range(rounds):
                barrier.wait()
                manager.save()
        except BaseException as exc:  # noqa: BLE001 - raised below, on the test's thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=saves, args=(m,)) for m in managers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
