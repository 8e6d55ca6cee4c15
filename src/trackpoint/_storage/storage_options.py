"""Storage options (credentials, an endpoint) for the URLs under a prefix, set once for the process.

Every trackpoint function that takes a path takes a URL too, and many paths are derived from the
one a user gives (``<prefix>-<n>``, the ``checkpoint`` state object, data files), some on a
writer thread. So options travel with a URL prefix, not with a call: a URL uses the options of
the longest registered prefix it starts with, and fsspec's own configuration (its
``FSSPEC_<PROTOCOL>_<OPTION>`` environment variables, ``fsspec.config.conf``) for the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from trackpoint._storage import is_url
from trackpoint.errors import InvalidArgumentError

__all__ = ["options_for", "set_storage_options"]

_lock = threading.Lock()
_by_prefix: dict[str, dict[str, Any]] = {}


def set_storage_options(prefix: str, **options: Any) -> None:
    """Use fsspec ``options`` for every URL under ``prefix``; with none, stop doing so.

    The options are the filesystem's constructor arguments (for ``s3://``, s3fs's
    ``endpoint_url``, ``key``, ``secret``, ``client_kwargs``...). They apply process-wide, to
    background saves too, and to every URL that is ``prefix`` or lies under it; the longest
    matching prefix wins. Without any, fsspec's configuration and the backend's defaults
    (``AWS_*`` environment variables, instance credentials) apply.

    Args:
        prefix: A URL: a bucket (``"s3://bucket"``) or a place in one (``"s3://bucket/run"``).
        **options: Passed to the filesystem (never shown in messages).

    Raises:
        InvalidArgumentError: ``prefix`` is not a URL.

    Example:
        >>> import trackpoint as tp
        >>> tp.set_storage_options("s3://bucket/run", endpoint_url="http://127.0.0.1:9000")
        >>> from trackpoint._storage.storage_options import options_for
        >>> options_for("s3://bucket/run/ckpt-1.index"), options_for("s3://bucket/other")
        ({'endpoint_url': 'http://127.0.0.1:9000'}, {})
        >>> tp.set_storage_options("s3://bucket/run")  # forget them again
    """
    if not isinstance(prefix, str) or not is_url(prefix):
        raise InvalidArgumentError(
            f"set_storage_options: {prefix!r} is not a URL; give the URL prefix the options are for, such as "
            "'s3://bucket' or 's3://bucket/run' (local paths need no options)"
        )
    key = prefix.rstrip("/")
    with _lock:
        if options:
            _by_prefix[key] = dict(options)
        else:
            _by_prefix.pop(key, None)


def options_for(url: str) -> Mapping[str, Any]:
    """The options set for the longest prefix of ``url`` (whole path segments), or none."""
    with _lock:
        found = [
            (len(prefix), options)
            for prefix, options in _by_prefix.items()
            if url == prefix or url.startswith(prefix + "/")
        ]
    return dict(max(found, key=lambda item: item[0])[1]) if found else {}
