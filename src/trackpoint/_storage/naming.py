"""File names of a bundle: ``prefix.index`` and ``prefix.data-SSSSS-of-NNNNN``."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "MAX_INDEX_BYTES",
    "PREVIOUS_SUFFIX",
    "STATE_FILENAME",
    "checkpoint_prefixes",
    "data_filename",
    "file_prefix",
    "index_filename",
]

PREVIOUS_SUFFIX = ".tp-prev"  # the version an overwrite keeps (see trackpoint._storage.previous)
STATE_FILENAME = "checkpoint"  # the state file naming a directory's checkpoints
MAX_INDEX_BYTES = 1 << 31  # the largest index a reader reads (into memory)


def index_filename(prefix: str) -> str:
    return prefix + ".index"


def data_filename(prefix: str, shard_id: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard_id:05d}-of-{num_shards:05d}"


_BUNDLE_FILE = re.compile(r"\.(index|data-\d{5}-of-\d{5})$")


def file_prefix(path: str) -> str | None:
    """The prefix of a bundle's file (its index or a data file) at ``path``; None for another name.

    Examples:
        >>> file_prefix("run/ckpt-1.data-00000-of-00002"), file_prefix("run/ckpt-1.index"), file_prefix("run/ckpt-1")
        ('run/ckpt-1', 'run/ckpt-1', None)
    """
    stripped = _BUNDLE_FILE.sub("", path)
    return stripped if stripped != path else None


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def checkpoint_prefixes(names: Iterable[str]) -> list[str]:
    """The checkpoint prefixes among a directory's file names (one per ``*.index``), in natural
    order, without the versions overwrites keep.

    Examples:
        >>> checkpoint_prefixes(["ckpt-10.index", "ckpt-2.index", "ckpt-2.data-00000-of-00001", "checkpoint"])
        ['ckpt-2', 'ckpt-10']
    """
    prefixes = (n.removesuffix(".index") for n in names if n.endswith(".index") and n != ".index")
    return sorted((p for p in prefixes if not p.endswith(PREVIOUS_SUFFIX)), key=_natural)
