"""A data shard being opened: begun now, taken by the first read that needs it (see ``Storage.start_data``).

Examples:
    >>> opening = Opening(lambda: (3, None, None), lambda: None)
    >>> opening.finish()
    (3, None, None)
    >>> opening.cancel()  # finished already: nothing to let go
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Opening"]


class Opening:
    """``finish()`` waits for the shard and gives ``(fd, stat, copy)`` as ``Storage.open_data`` does;
    ``cancel()`` lets go of it unread. Whichever comes first is the only one that acts."""

    def __init__(self, finish: Callable[[], tuple[int, Any, Any]], cancel: Callable[[], None]) -> None:
        self._finish: Callable[[], tuple[int, Any, Any]] | None = finish
        self._cancel: Callable[[], None] | None = cancel

    def finish(self) -> tuple[int, Any, Any]:
        """The opened shard.

        Raises:
            ValueError: It was finished or cancelled already.
            CheckpointError: Opening it failed, as ``Storage.open_data`` would raise.
        """
        finish, self._finish, self._cancel = self._finish, None, None
        if finish is None:
            raise ValueError("this opening was finished or cancelled already")
        return finish()

    def cancel(self) -> None:
        """Let the shard go unread (its copy closed, its download stopped)."""
        cancel, self._finish, self._cancel = self._cancel, None, None
        if cancel is not None:
            cancel()
