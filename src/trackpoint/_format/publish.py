"""Publishing a bundle so that no reader ever sees a partial checkpoint under its final name.

Every file of a save is written under a temporary name in the target directory (see
:mod:`trackpoint._format.temps`), flushed and fsynced, then renamed into place, the
``.index`` last, and the directory is fsynced. A killed save leaves only temporary files,
which readers never look at and a later save into the directory removes. Overwriting a
prefix keeps its previous version until the new index is in place (see
:mod:`trackpoint._format.previous`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

from trackpoint._format import atomic, naming, object_bundles, previous
from trackpoint._format.temps import remove_stale_temps
from trackpoint._storage import is_url
from trackpoint.errors import WriteError

__all__ = ["prepare_directory", "publish", "publish_objects", "put_data", "withdraw"]


def prepare_directory(prefix: str) -> None:
    """Create the directory of ``prefix`` if needed, clear what killed saves left in it, and
    finish an interrupted overwrite of ``prefix`` (so TensorFlow reads it again).

    At a URL: clear what killed saves left in the local temporary directory and at the
    prefix (see :mod:`.object_bundles`), and refuse a prefix whose index is committed
    (objects are never overwritten; see :func:`publish`).
    """
    if is_url(prefix):
        remove_stale_temps(tempfile.gettempdir())
        object_bundles.clear_abandoned(prefix)
        return
    directory = os.path.dirname(prefix)
    if directory:
        os.makedirs(directory, exist_ok=True)
    remove_stale_temps(directory)
    previous.settle(prefix)


def publish(
    data_files: Sequence[tuple[str, str]],
    index_temp: str,
    index_final: str,
    num_shards: int,
    others: Sequence[str] = (),
    uploaded: Sequence[tuple[str, str]] = (),
) -> None:
    """Rename fsynced temporaries into place: data files first, the index last.

    At a URL: upload them, the index last and only if absent; ``others`` are data objects
    other processes uploaded, which must be in place, and ``uploaded`` the ``(temp, url)``
    pairs :func:`put_data` put already (local files are all renamed here).

    At no instant does the prefix lack a whole checkpoint: the index is replaced by one
    rename, and data files the current index names are kept under the previous prefix
    until the new index is in place. Data files the new index (of ``num_shards`` shards)
    does not name are removed afterwards; their space is freed on a helper thread.

    Raises:
        OSError: Nothing was published and the prefix holds what it held before.
        WriteError: A rename failed part way and the previous version could not be put back;
            the message says where it is.
    """
    if is_url(index_final):
        from trackpoint._storage import remote

        # The index, if absent, is the commit.
        remote.commit(data_files, index_temp, index_final, others=others, uploaded=[url for _, url in uploaded])
        for temp, _ in [*data_files, *uploaded]:
            atomic.remove_quietly(temp)
        atomic.remove_quietly(index_temp)
        return
    if others or uploaded:
        raise ValueError("data files other processes wrote are published with the rest on a local filesystem")
    prefix = index_final[: -len(naming.index_filename(""))]
    previous.settle(prefix)
    new = {final for _, final in data_files}
    old = previous.data_files(prefix)
    named = {naming.data_filename(prefix, i, num_shards) for i in range(num_shards)}
    kept = not new.isdisjoint(old) and os.path.exists(index_final)
    if kept:
        previous.keep(prefix)
    done: list[str] = []
    try:
        for temp, final in data_files:
            os.replace(temp, final)
            done.append(final)
        os.replace(index_temp, index_final)
    except BaseException as exc:
        _undo(prefix, kept, [path for path in done if path not in old], exc)
        raise
    atomic.fsync_directory(os.path.dirname(index_final))
    try:  # the new version is published: what follows only tidies up, and may fail quietly
        atomic.remove([path for path in old if path not in named])
        previous.discard(prefix)
    except OSError:
        pass  # left for the next save of this prefix to remove


def put_data(data_files: Sequence[tuple[str, str]], prefix: str) -> None:
    """Upload the staged data files ``(temp, url)`` of the bundle at URL ``prefix`` ahead of its
    index, each only if absent; :func:`publish` commits them later (as ``uploaded``), or
    :func:`withdraw` deletes them. The local copies stay until then.

    Raises:
        WriteError: An upload failed, or an object is there already; nothing of these is left.
    """
    from trackpoint._storage import remote

    remote.upload(data_files, f"checkpoint {prefix}")


def withdraw(data_files: Sequence[tuple[str, str]], prefix: str) -> None:
    """Delete the data objects :func:`put_data` put for a bundle that is not committed after
    all, each only while it still holds the bytes of its local copy: another writer's object
    put over it since is left alone."""
    from trackpoint._storage import remote

    remote.delete_own(list(reversed(data_files)), f"checkpoint {prefix}")


def publish_objects(files: Sequence[tuple[str, str]], what: str) -> None:
    """Put local ``(file, url)`` pairs at their URLs as a bundle is committed there (see
    :func:`trackpoint._storage.remote.commit`): each only if nothing is at its URL, the last one
    (an index) last; ``what`` names them in messages.

    Raises:
        WriteError: Nothing was published; the message says why.
    """
    from trackpoint._storage import remote

    *first, (last_local, last_url) = files
    remote.commit(first, last_local, last_url, what=what)


def _undo(prefix: str, kept: bool, added: list[str], cause: BaseException) -> None:
    """Return the prefix to its previous version after a rename failed part way."""
    for path in added:  # data files no index names
        atomic.remove_quietly(path)
    if not kept:
        return
    try:
        previous.settle(prefix)
    except OSError as exc:
        raise WriteError(
            f"could not write checkpoint {prefix}: {cause}; then putting its previous version back failed ({exc}). "
            f"The previous version is whole at {previous.previous_prefix(prefix)}, and trackpoint reads it when "
            f"asked for {prefix}; TensorFlow cannot read {prefix} until the next save to it or "
            f"`trackpoint verify --repair {prefix}` puts it back."
        ) from cause
