"""An SSTable block's entries read restart by restart, every restart at once (numpy).

An index with one entry per variable has tens of thousands of entries; read one by one in
Python they were the largest part of parsing a restore's index (12 ms of a 0.11 s restore of
20,000 variables from S3). A block's restart array says where runs of entries begin with
their whole key (``shared == 0``; see :mod:`.sstable`). Each run is a lane, and each step
reads the next entry of every lane: its three varints, where its key and value lie. The keys
are then joined in one pass.

Anything the lanes cannot vouch for gives None: a restart array out of order, a run that does
not end exactly where the next begins, a run that does not start with a whole key, a length of
more than 5 bytes, a key or value past the run, a prefix longer than the key before it, a run
of more than 64 entries. The
caller then reads the block entry by entry (``sstable_read._block_spans``), which also words
the error. Where a block is sound the two readings give the same entries.

Examples:
    >>> import numpy as np
    >>> from trackpoint._format.sstable import build_table
    >>> from trackpoint._format.sstable_read import read_table_spans
    >>> table = read_table_spans(build_table([(b"key-1", b"a"), (b"key-2", b"bc")]), "example")
    >>> table.keys, [table.value(i) for i in range(2)]
    ([b'key-1', b'key-2'], [b'a', b'bc'])
"""

from __future__ import annotations

import numpy as np

from trackpoint._format.entry_columns import padded, varints

__all__ = ["block_spans"]

_VARINT32 = 5  # bytes
_MAX_STEPS = 64  # entries per run: writers restart every 16 (TensorFlow's, LevelDB's, ours)


def block_spans(data: bytes, restarts: np.ndarray) -> tuple[list[bytes], np.ndarray, np.ndarray] | None:
    """The entries of a block whose entries are ``data`` and whose restart offsets are ``restarts``:
    ``(keys, value starts, value ends)``, values as spans of ``data``; None where the lanes cannot
    vouch for them (see the module docstring)."""
    limit = len(data)
    starts = restarts.astype(np.int64)
    if not len(starts) or starts[0] != 0 or starts[-1] >= limit or (np.diff(starts) <= 0).any():
        return None
    run_ends = np.append(starts[1:], limit)
    buf = padded(data)  # three varints of an entry may be read past the last one
    pos = starts.copy()
    lanes = np.arange(len(starts))
    steps: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    while len(lanes):
        at = pos[lanes]
        shared, n1, ok1 = varints(buf, at)
        unshared, n2, ok2 = varints(buf, at + n1)
        value_len, n3, ok3 = varints(buf, at + n1 + n2)
        # Lengths past the block are refused before any sum can overflow; as the reading one by
        # one does, a length takes at most 5 bytes (a varint32).
        if not (ok1 & ok2 & ok3).all() or (np.maximum(np.maximum(shared, unshared), value_len) > limit).any():
            return None
        if (np.maximum(np.maximum(n1, n2), n3) > _VARINT32).any():
            return None
        key_start = at + n1 + n2 + n3
        key_end = key_start + unshared.astype(np.int64)
        value_end = key_end + value_len.astype(np.int64)
        if (value_end > run_ends[lanes]).any() or (not steps and shared.any()):
            return None
        steps.append((lanes, shared.astype(np.int64), key_start, key_end, value_end))
        if len(steps) > _MAX_STEPS:
            return None  # runs far longer than any writer's: one step per entry would cost more than a loop
        pos[lanes] = value_end
        lanes = lanes[value_end < run_ends[lanes]]
    # Entry (lane, step) goes at the lane's first entry plus the step: lanes are in file order.
    counts = np.bincount(np.concatenate([step[0] for step in steps]), minlength=len(starts))
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    total = int(counts.sum())
    shared_all, key_starts, key_ends, value_ends = (np.empty(total, np.int64) for _ in range(4))
    for number, (lane_ids, shared, key_start, key_end, value_end) in enumerate(steps):
        slots = first[lane_ids] + number
        shared_all[slots], key_starts[slots], key_ends[slots], value_ends[slots] = shared, key_start, key_end, value_end
    key_lengths = shared_all + (key_ends - key_starts)
    if (shared_all[1:] > key_lengths[:-1]).any():  # a run's first entry shares nothing, so no run looks back
        return None
    keys: list[bytes] = []
    add = keys.append
    key = b""
    for common, a, b in zip(shared_all.tolist(), key_starts.tolist(), key_ends.tolist()):
        key = key[:common] + data[a:b] if common else data[a:b]
        add(key)
    return keys, key_ends, value_ends
