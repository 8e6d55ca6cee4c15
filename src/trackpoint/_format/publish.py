"""Publishing a bundle so that no reader ever sees a partial checkpoint under its final name.

Each file of a save is written under a temporary name (see :meth:`Storage.temp_path
<trackpoint._format.storage.Storage.temp_path>`), then the storage that holds the prefix puts
them all in place, the ``.index`` last: locally by fsync and rename (see
:mod:`.local_storage`), in an object store by uploads under the final names with the index put
only if absent (see :mod:`.object_storage`).
"""

from __future__ import annotations

from collections.abc import Sequence

from trackpoint._format.storage import storage_for

__all__ = ["prepare_directory", "publish"]


def prepare_directory(prefix: str) -> None:
    """Make ready to write a bundle at ``prefix``: locally, create its directory, clear what
    killed saves left there and finish an interrupted overwrite of ``prefix``; at a URL, clear
    what killed saves left and refuse a prefix whose index is committed."""
    storage_for(prefix).prepare(prefix)


def publish(
    data_files: Sequence[tuple[str, str]],
    index_temp: str,
    index_final: str,
    num_shards: int,
    others: Sequence[str] = (),
    uploaded: Sequence[tuple[str, str]] = (),
) -> None:
    """Put a bundle in place, the data files ``(temp, final)`` first and the index last.

    ``others`` (at a URL) are data objects other processes put in place already, and
    ``uploaded`` the pairs this process put ahead (see :meth:`Storage.put_data
    <trackpoint._format.storage.Storage.put_data>`).

    Raises:
        OSError: Nothing was published and the prefix holds what it held before.
        WriteError: Nothing was committed (at a URL), or a local rename failed part way and
            the previous version could not be put back; the message says where it is.
    """
    storage_for(index_final).publish(data_files, index_temp, index_final, num_shards, others, uploaded)
