"""Telling a checkpoint's data files which stored bytes will be read soon, so that they arrive together.

Locally there is nothing to do: the kernel reads ahead. At a URL, each data shard is a local
copy filled with the byte ranges readers ask for (see :mod:`trackpoint._storage.ranged`); told
which ranges come next, it fetches them now, neighbours in one request, instead of one request
per tensor as each read arrives. A hint is only a speed-up: a shard that cannot be opened, or a
range the index gets wrong, is left for the read that needs it to report.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.zeros(4)})
    >>> with BundleReader(prefix) as reader:
    ...     reader.expect_entries(reader.entries())  # local files: nothing to fetch
    ...     reader.read("w")
    array([0., 0., 0., 0.])
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from trackpoint._format.entries import Entry
from trackpoint.errors import CheckpointError

if TYPE_CHECKING:
    from trackpoint._storage.shard_files import ShardFiles

__all__ = ["expect", "expect_entries"]


def expect(
    files: ShardFiles, keys: Sequence[str], shard_ids: np.ndarray, offsets: np.ndarray, sizes: np.ndarray
) -> None:
    """Fetch the stored bytes of the rows of ``keys`` (checked already) into the local copies of
    ``files``, per shard in one go, unless the shards are local or held whole already."""
    if not files.local_copies or all(files.held_whole(i) for i in range(files.num_shards)):
        return  # local, or downloaded already: no spans to work out
    for shard_id in np.unique(shard_ids).tolist():
        if files.held_whole(int(shard_id)):
            continue
        rows = np.flatnonzero((shard_ids == shard_id) & (sizes > 0))
        if len(rows):
            spans = np.column_stack((offsets[rows], offsets[rows] + sizes[rows]))
            files.open(int(shard_id), keys[int(rows[0])], spans, wait=False)  # the reads wait for their bytes


def expect_entries(files: ShardFiles, entries: Sequence[Entry]) -> None:
    """:func:`expect` for entries about to be read one by one (a tool's, or every entry for a
    verify); one whose shard cannot be opened is left for its read to report."""
    if not files.local_copies:
        return
    plain = [e for e in entries if not e.is_sliced and 0 <= e.shard_id < files.num_shards]
    with contextlib.suppress(CheckpointError):
        expect(
            files,
            [e.key for e in plain],
            np.array([e.shard_id for e in plain], np.int64),
            np.array([e.offset for e in plain], np.int64),
            np.array([max(e.size, 0) for e in plain], np.int64),
        )
