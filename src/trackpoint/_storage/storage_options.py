"""Storage options (credentials, an endpoint) for the URLs under a prefix, set once for the process.

Every trackpoint function that takes a path takes a URL too, and many paths are derived from the
one a user gives (``<prefix>-<n>``, the ``checkpoint`` state object, data files), some on a
writer thread. So options travel with a URL prefix, not with a call: a URL uses the options of
the longest registered prefix it starts with, and fsspec's own configuration (its
``FSSPEC_<PROTOCOL>_<OPTION>`` environment variables, ``fsspec.config.conf``) for the rest.

A public function's ``storage_options=`` keyword registers its options the same way, for the
prefix the given path implies (:func:`use_storage_options`): the registration outlives the
call, because a restore's deferred values and an async save's writes reach the store after it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from trackpoint._storage import is_url
from trackpoint.errors import InvalidArgumentError

__all__ = ["options_for", "set_storage_options", "urls_among", "use_storage_options", "use_storage_options_for_urls"]

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

    Examples:
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


def use_storage_options(
    path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None, *, directory: bool = False
) -> None:
    """Register the ``storage_options=`` a public function was given for ``path``; None does nothing.

    A path may be a checkpoint prefix (``run/ckpt-1``, whose ``.index`` and data objects are its
    siblings) or a directory (``run``, holding a ``checkpoint`` state object and checkpoints),
    and which one is known only once the store is asked, with the options. So they are
    registered for the path's parent, which covers both (``s3://bucket/run`` for
    ``s3://bucket/run/ckpt-1``), never above the bucket (``s3://bucket`` for ``s3://bucket``
    and ``s3://bucket/ckpt-1``). A caller that knows ``path`` is a directory passes
    ``directory=True``: the options are then registered for the directory itself, and do not
    reach its siblings.

    As with :func:`set_storage_options`, the options apply process-wide to every URL under that
    prefix, after the call too (deferred restores and background saves need them), and the
    latest registration for a prefix replaces an earlier one; a longer registered prefix still
    wins for the URLs under it. An empty mapping registers nothing.

    Args:
        path: The path given to the public function.
        storage_options: Options for the fsspec filesystem of ``path``, or None.
        directory: Whether ``path`` is known to be a directory.

    Raises:
        InvalidArgumentError: ``storage_options`` is not a mapping with ``str`` keys, or it is
            non-empty and ``path`` is local.

    Examples:
        >>> use_storage_options("s3://bucket/run/ckpt-1", {"endpoint_url": "http://127.0.0.1:9000"})
        >>> options_for("s3://bucket/run/checkpoint"), options_for("s3://bucket/other")
        ({'endpoint_url': 'http://127.0.0.1:9000'}, {})
        >>> set_storage_options("s3://bucket/run")  # forget them again
    """
    text = _text(path)
    if storage_options is None or not _checked(text, storage_options):
        return
    if text is None or not is_url(text):
        raise InvalidArgumentError(
            f"{text if text is not None else repr(path)}: local paths take no storage options; drop "
            "storage_options, or give a URL such as 's3://bucket/run'"
        )
    set_storage_options(_scope(text, directory), **storage_options)


def use_storage_options_for_urls(
    paths: Iterable[str | os.PathLike[str]], storage_options: Mapping[str, Any] | None
) -> None:
    """:func:`use_storage_options` for each URL among ``paths``, for a call that takes several
    (a conversion's source and destination, the inputs of an average); local ones are skipped.

    Raises:
        InvalidArgumentError: ``storage_options`` is not a mapping with ``str`` keys, or it is
            non-empty and none of ``paths`` is a URL.

    Examples:
        >>> use_storage_options_for_urls(["run/ckpt-1", "s3://bucket/hf/"], {"anon": True})
        >>> options_for("s3://bucket/hf/model.safetensors"), options_for("s3://other/x")
        ({'anon': True}, {})
        >>> set_storage_options("s3://bucket")  # forget them again
    """
    texts = [(_text(path), path) for path in paths]
    shown = ", ".join(text if text is not None else repr(path) for text, path in texts)
    if storage_options is None or not _checked(shown, storage_options):
        return
    urls = [text for text, _ in texts if text is not None and is_url(text)]
    if not urls:
        raise InvalidArgumentError(
            f"{shown}: local paths take no storage options, and none of these is a URL; drop storage_options, "
            "or give a URL such as 's3://bucket/run'"
        )
    for url in urls:
        set_storage_options(_scope(url, False), **storage_options)


def urls_among(values: Iterable[object]) -> list[str]:
    """The strings among ``values`` that are URLs, each once, in order: those storage options apply to.

    Examples:
        >>> urls_among(["run/ckpt-1", "s3://bucket/run", 3, None, "s3://bucket/run", "gs://b/x"])
        ['s3://bucket/run', 'gs://b/x']
    """
    found: list[str] = []
    for value in values:
        if isinstance(value, str) and is_url(value) and value not in found:
            found.append(value)
    return found


def _text(path: object) -> str | None:
    """``path`` as a str, or None when it is no path at all."""
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        return text if isinstance(text, str) else None
    return None


def _checked(where: str | None, storage_options: object) -> bool:
    """Whether ``storage_options`` holds any option, once checked to be a mapping with ``str`` keys.

    Raises:
        InvalidArgumentError: It is not (the message names the path ``where``, never a value).
    """
    if not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            f"{where}: storage_options must be a mapping of option names to values, such as "
            "{'endpoint_url': ..., 'key': ..., 'secret': ...}, not a " + type(storage_options).__name__
        )
    # Only the keys' types are named: a value, or a key mistaken for an option, may be a secret.
    odd = sorted({type(key).__name__ for key in storage_options if not isinstance(key, str)})
    if odd:
        raise InvalidArgumentError(
            f"{where}: storage_options has keys of type {', '.join(odd)}; its keys are the option names of the "
            "fsspec filesystem, as str (e.g. 'endpoint_url', 'key', 'secret')"
        )
    return bool(storage_options)


def _scope(url: str, directory: bool) -> str:
    """The prefix whose URLs the options given for ``url`` apply to (see :func:`use_storage_options`)."""
    scheme, _, rest = url.partition("://")
    rest = rest.rstrip("/")
    if not rest:
        raise InvalidArgumentError(
            f"{url}: the URL names no bucket; give the path of the checkpoint, such as '{scheme}://bucket/run'"
        )
    parent, _, _ = rest.rpartition("/")
    if directory or not parent.strip("/"):  # the directory; or the bucket, above which nothing is
        return f"{scheme}://{rest}"
    return f"{scheme}://{parent}"
