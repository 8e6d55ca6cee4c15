"""File names of a bundle: ``prefix.index`` and ``prefix.data-SSSSS-of-NNNNN``."""

from __future__ import annotations

__all__ = ["data_filename", "index_filename"]


def index_filename(prefix: str) -> str:
    return prefix + ".index"


def data_filename(prefix: str, shard_id: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard_id:05d}-of-{num_shards:05d}"
