"""Overwriting a checkpoint in place with a whole version readable from its prefix at every instant.

TensorFlow's file names are fixed (``P.index``, ``P.data-SSSSS-of-NNNNN``), so writing ``P``
again with the same shard count must replace files that the current index describes. Before
the first such rename, the current version's files are hard-linked under the prefix
``P.tp-prev`` (the index last, so a previous version with an index is whole), and they stay
there until the new index is in place. Then:

- before any data file is replaced, ``P`` is the old version, for everyone;
- from the first data-file rename until the index rename (N + 1 renames, no fsync in
  between: TensorFlow's window), ``P.index`` is still the old one but some data files are
  new, which TensorFlow reports as a checksum error. trackpoint sees ``P.tp-prev.index``
  with the same bytes as ``P.index`` and reads the previous version instead;
- once the new index is in place, ``P`` is the new version; the links are removed.

A save killed inside the window leaves that state behind. The next save or repair of ``P``
(:func:`settle`) puts the previous data files back, after which TensorFlow reads ``P`` again.
An overwrite with another shard count renames no file the old index names (the names
differ), so the index rename alone switches versions; the old data files are removed after.
"""

from __future__ import annotations

import filecmp
import glob
import os
import shutil
from dataclasses import dataclass

from trackpoint._storage import atomic, local_files, naming
from trackpoint._storage.temps import temp_path
from trackpoint.errors import CheckpointError, NotFoundError

__all__ = [
    "PREVIOUS_SUFFIX",
    "OverwriteState",
    "data_files",
    "discard",
    "inspect",
    "keep",
    "previous_prefix",
    "readable_prefix",
    "settle",
]

PREVIOUS_SUFFIX = naming.PREVIOUS_SUFFIX


def previous_prefix(prefix: str) -> str:
    return prefix + PREVIOUS_SUFFIX


def data_files(prefix: str) -> list[str]:
    """The ``.data-SSSSS-of-NNNNN`` files present under ``prefix``, any shard count."""
    return sorted(glob.glob(glob.escape(prefix) + ".data-?????-of-?????"))


def _same_index(prefix: str) -> bool:
    """True when ``prefix``'s index is the previous version's (or missing): its data may be new."""
    current, kept = naming.index_filename(prefix), naming.index_filename(previous_prefix(prefix))
    if _same_file(current, kept):
        return True
    try:
        ours = local_files.read_regular(current, "checkpoint index", naming.MAX_INDEX_BYTES)[0]
    except NotFoundError:
        return True
    except CheckpointError:
        return False  # a special or unreadable file: reading the prefix itself reports it
    try:
        return ours == local_files.read_regular(kept, "checkpoint index", naming.MAX_INDEX_BYTES)[0]
    except CheckpointError:
        return False


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def readable_prefix(prefix: str) -> str:
    """The prefix a reader should open: ``prefix``, or its previous version while an overwrite
    of it is unfinished (one ``stat`` when there is none)."""
    if not os.path.exists(naming.index_filename(previous_prefix(prefix))):
        return prefix
    return previous_prefix(prefix) if _same_index(prefix) else prefix


@dataclass(frozen=True)
class OverwriteState:
    """What an interrupted overwrite left at a prefix.

    Attributes:
        prefix: The checkpoint prefix.
        interrupted: True when the prefix's data files mix two versions (a save was killed
            inside TensorFlow's window): TensorFlow cannot read it, trackpoint reads
            :attr:`previous` instead, and the next save to the prefix (or ``trackpoint verify
            --repair``) restores it.
        previous: The prefix of the kept previous version, or "" when there is none.
        leftovers: Files of an earlier overwrite that the next save removes (stale data files
            of another shard count are not listed: they are only known once the index is read).
    """

    prefix: str
    interrupted: bool
    previous: str
    leftovers: tuple[str, ...]


def inspect(prefix: str) -> OverwriteState:
    """The state an overwrite left at ``prefix`` (nothing unusual: not interrupted, no leftovers)."""
    kept = previous_prefix(prefix)
    has_kept = os.path.exists(naming.index_filename(kept))
    files = data_files(kept) + ([naming.index_filename(kept)] if has_kept else [])
    interrupted = has_kept and _same_index(prefix) and _mixed(prefix)
    return OverwriteState(prefix, interrupted, kept if has_kept else "", () if interrupted else tuple(files))


def _mixed(prefix: str) -> bool:
    """Whether some data file of ``prefix`` is no longer the kept version's (killed after the
    first data-file rename, not merely after the previous version was kept)."""
    kept = previous_prefix(prefix)
    for path in data_files(kept):
        final = prefix + path[len(kept) :]
        if not (_same_file(path, final) or (os.path.exists(final) and filecmp.cmp(path, final, shallow=False))):
            return True
    return False


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (FAT, some network file systems): a durable copy
        shutil.copyfile(source, target)
        with open(target, "rb+") as f:
            os.fsync(f.fileno())


def keep(prefix: str) -> None:
    """Link the whole current version of ``prefix`` under its previous prefix, the index last."""
    kept = previous_prefix(prefix)
    discard(prefix)
    for path in data_files(prefix):
        _link_or_copy(path, kept + path[len(prefix) :])
    _link_or_copy(naming.index_filename(prefix), naming.index_filename(kept))
    atomic.fsync_directory(os.path.dirname(prefix))  # durable before any file it keeps is replaced


def discard(prefix: str) -> None:
    """Remove the kept previous version of ``prefix``, its index first (an incomplete version
    is never left looking whole)."""
    kept = previous_prefix(prefix)
    atomic.remove([naming.index_filename(kept)] + data_files(kept))  # freed in the background


def settle(prefix: str) -> bool:
    """Finish what an interrupted overwrite of ``prefix`` left: put the previous version's data
    files back while its index is still the one in place, then remove the kept copies.

    Returns:
        True when a file of the previous version was put back (not when the kept copies were
        merely left over).

    Raises:
        OSError: A file could not be restored; the kept version stays, and readers use it.
    """
    kept = previous_prefix(prefix)
    if not os.path.exists(naming.index_filename(kept)):
        if data_files(kept):
            discard(prefix)  # a kept version that never got its index: not whole, not needed
        return False
    restored = False
    if _same_index(prefix):
        for path in data_files(kept) + [naming.index_filename(kept)]:
            final = prefix + path[len(kept) :]
            if _same_file(path, final):
                continue  # never replaced (and rename() between two links of one file does nothing)
            restored = True
            temp = temp_path(final)
            _link_or_copy(path, temp)  # kept stays whole until every file is back
            try:
                os.replace(temp, final)
            except BaseException:
                atomic.remove_quietly(temp)
                raise
        if restored:
            atomic.fsync_directory(os.path.dirname(prefix))  # back in place before the copies go
    discard(prefix)
    return restored
