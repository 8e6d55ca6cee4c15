"""Finding every damaged part of a checkpoint, and repairing an interrupted overwrite.

A read stops at the first problem; :func:`verify_checkpoint` does not: a damaged index block is
reported and skipped, and every damaged or missing tensor is listed, each with the message its
read raised. :func:`repair_checkpoint` puts back the previous version an overwrite cut short
kept. Both are public through :mod:`trackpoint.reader` (``tp.verify_checkpoint``,
``tp.repair_checkpoint``, ``tp.Damage``).

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "ckpt"), {"w": np.ones(3)})
    >>> with open(prefix + ".data-00000-of-00001", "r+b") as f:
    ...     _ = f.write(b"\\xff")
    >>> [damage.key for damage in verify_checkpoint(prefix)]
    ['w']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.entries import slice_keys
from trackpoint._format.keys import encode_key
from trackpoint._format.slices import readable_key
from trackpoint._format.state_file import resolve_prefix
from trackpoint._storage import previous
from trackpoint._storage.storage_options import use_storage_options
from trackpoint._storage.store_errors import UNANSWERED
from trackpoint.errors import CheckpointError, NotFoundError, PermissionDeniedError, WriteError

__all__ = ["Damage", "repair_checkpoint", "verify_checkpoint"]


@dataclass(frozen=True)
class Damage:
    """One problem :meth:`CheckpointReader.verify` found.

    Attributes:
        key: The affected checkpoint key, or None for a damaged index block; the key of one
            slice of a partitioned tensor reads ``name[0:4,:]`` (its index key is binary).
        message: What is wrong, naming the file.
    """

    key: str | None
    message: str


def verify_checkpoint(
    ckpt_dir_or_file: str,
    progress: Callable[[int, int], None] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> list[Damage]:
    """Read every index block and every tensor, checking every checksum; report all damage.

    Unlike reading, this does not stop at the first problem: a damaged index block is
    reported and skipped, and every damaged or missing tensor is listed.

    Args:
        ckpt_dir_or_file: A checkpoint prefix, or a directory with a ``checkpoint`` file.
        progress: Called as ``progress(bytes_done, bytes_total)`` after each tensor.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for the URLs beside it (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Returns:
        Every problem found; empty when the checkpoint is intact.

    Raises:
        NotFoundError: There is no checkpoint at ``ckpt_dir_or_file``.
        PermissionDeniedError: Its index or state file may not be read.
        InvalidArgumentError: Bad ``storage_options`` (not a mapping with ``str`` keys, or for a
            local path).

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = tp.save_tensors(prefix, {"w": np.ones(3)})
        >>> tp.verify_checkpoint(prefix)
        []
    """
    use_storage_options(ckpt_dir_or_file, storage_options)
    prefix = resolve_prefix(ckpt_dir_or_file)
    return _find_damage(prefix, progress)


def repair_checkpoint(ckpt_dir_or_file: str, *, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Finish an interrupted in-place overwrite: put the previous version's files back.

    A save killed while it replaced the data files of an existing checkpoint leaves them
    mixing two versions, which TensorFlow cannot read (trackpoint reads the whole previous
    version it kept). This puts that version back under the prefix and removes the kept
    copies; the next save to the prefix does the same first.

    Args:
        ckpt_dir_or_file: A checkpoint prefix, or a directory with a ``checkpoint`` file.
        storage_options: For a URL, options of its fsspec filesystem (``endpoint_url``, ``key``,
            ``secret``...), kept process-wide for the URLs beside it (see
            :func:`trackpoint._storage.storage_options.use_storage_options`). Local paths take none.

    Returns:
        True when the previous version was put back; False when there was nothing to repair.

    Raises:
        NotFoundError: There is no checkpoint at ``ckpt_dir_or_file``.
        WriteError: A file could not be restored; the kept version stays, and is still read.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = tp.save_tensors(prefix, {"w": np.ones(3)})
        >>> tp.repair_checkpoint(prefix)
        False
    """
    use_storage_options(ckpt_dir_or_file, storage_options)
    prefix = resolve_prefix(ckpt_dir_or_file)
    return _repair(prefix)


def _find_damage(prefix: str, progress: Callable[[int, int], None] | None = None) -> list[Damage]:
    """Every problem of the checkpoint at ``prefix`` (see :func:`verify_checkpoint`).

    Raises:
        NotFoundError: There is no checkpoint at ``prefix``.
        PermissionDeniedError: Its index may not be read.
    """
    damaged_blocks: list[str] = []
    try:
        bundle = BundleReader(prefix, damaged_blocks)
    except UNANSWERED + (NotFoundError, PermissionDeniedError):  # nothing to report on
        raise
    except CheckpointError as exc:
        return [Damage(None, str(exc))]
    found = [Damage(None, message) for message in damaged_blocks]
    if previous.inspect(prefix).interrupted:  # reading the version an interrupted overwrite kept
        message = (
            f"{prefix}: an overwrite of this checkpoint was interrupted, so its data files mix two versions, which "
            f"TensorFlow cannot read. trackpoint reads the previous version, kept whole at {bundle.prefix} (checked "
            f"here). Repair it with `trackpoint verify --repair {prefix}` or tp.repair_checkpoint(); the next save to "
            "it repairs it too."
        )
        found.insert(0, Damage(None, message))
    malformed: dict[bytes, CheckpointError] = {}
    entries = bundle.entries(malformed)
    found += [Damage(readable_key(raw), str(exc)) for raw, exc in malformed.items()]
    hidden = slice_keys(entries)
    keys = [(e.key, e.size) for e in entries if encode_key(e.key) not in hidden]
    total = sum(max(size, 0) for _, size in keys)
    done = 0
    with bundle:
        bundle.expect_entries(entries)  # at a URL: fetched together, not one request per tensor
        for key, size in keys:
            try:
                bundle.read(key)
            except UNANSWERED:
                raise  # a store not answering (or not reached) damaged nothing, and every key would wait as long
            except CheckpointError as exc:
                found.append(Damage(readable_key(key), str(exc)))
            done += max(size, 0)
            if progress is not None:
                progress(done, total)
    return found


def _repair(prefix: str) -> bool:
    """Finish an interrupted overwrite of ``prefix`` (see :func:`repair_checkpoint`); whether there was one.

    Raises:
        WriteError: A file could not be restored; the kept version stays, and is still read.
    """
    try:
        return previous.settle(prefix)
    except OSError as exc:
        raise WriteError(
            f"could not repair {prefix}: {exc}. Its previous version is still kept whole at "
            f"{previous.previous_prefix(prefix)}, and trackpoint reads it; fix the cause and repair "
            "again."
        ) from exc
