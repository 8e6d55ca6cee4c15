"""An object store client's exceptions, translated into trackpoint's at the storage boundary.

fsspec's backends raise their own: botocore's ``ReadTimeoutError`` (or an ``asyncio`` or
``aiohttp`` timeout) for a store that does not answer, s3fs's ``PermissionError`` for
``AccessDenied`` or ``InvalidAccessKeyId``, botocore's ``NoCredentialsError``, botocore's
``EndpointConnectionError`` (or aiohttp's ``ClientConnectorError``, a ``ConnectionRefusedError``
beneath either) for an endpoint nothing listens at, and a
``TypeError`` for an option the client does not take (s3fs builds its client at the first
request, so a mistyped option surfaces there, not when the filesystem is made). Each becomes
the :mod:`trackpoint.errors` class that says what happened, with the URL and what to do,
raised ``from`` the original.

Nothing here retries: by the time an exception arrives, the client has run the retry policy
the user configured (s3fs's ``retries``, botocore's ``config_kwargs={"retries": ...}``), and a
second loop around it would multiply its waits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from trackpoint._storage.storage_options import options_for
from trackpoint.errors import (
    CheckpointError,
    DataLossError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    WriteError,
)

__all__ = ["UNANSWERED", "call", "translate"]

#: A store that did not answer in time, or could not be reached: nothing is known of what it
#: holds, so no caller may take this for "absent", "changed" or "damaged", and asking again
#: would wait as long.
UNANSWERED: tuple[type[CheckpointError], ...] = (DeadlineExceededError, UnavailableError)

_T = TypeVar("_T")

# Timeouts that are no builtin TimeoutError: botocore's (its urllib3 and requests parents
# included). asyncio's, aiohttp's and fsspec's are TimeoutErrors (Python 3.11+).
_TIMEOUT_NAMES = frozenset({"ReadTimeoutError", "ConnectTimeoutError", "ReadTimeout", "ConnectTimeout"})
# A connection that could not be made (refused, or the endpoint's name not found): botocore's
# and aiohttp's. botocore's ConnectTimeoutError is an EndpointConnectionError too, but a timeout
# is told first.
_UNREACHABLE_NAMES = frozenset({"EndpointConnectionError", "ClientConnectorError"})
# Credentials botocore could not find or complete: as much a refusal as a wrong key.
_NO_CREDENTIALS_NAMES = frozenset({"NoCredentialsError", "PartialCredentialsError"})
_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '([^']+)'")


def call(url: str, what: str, action: Callable[[], _T], *, doing: str = "read") -> _T:
    """Run one request of the backend's, its exceptions translated by :func:`translate`.

    Args:
        url: The object or directory the request is for.
        what: What is there, for messages ("checkpoint index", "objects").
        action: The request.
        doing: What the request does to it: "read", "list", "write" or "delete".
    """
    try:
        return action()
    except CheckpointError:
        raise
    except Exception as exc:
        raise translate(url, what, exc, doing=doing) from exc


def translate(url: str, what: str, exc: BaseException, *, doing: str = "read") -> CheckpointError:
    """The trackpoint error for ``exc``, which a request to ``doing`` the ``what`` at ``url`` raised.

    A timeout is a :class:`DeadlineExceededError`, never "not found"; an endpoint that could
    not be connected to an :class:`UnavailableError`, never damage; a refusal of the
    credentials a :class:`PermissionDeniedError`; an option the backend does not take an
    :class:`InvalidArgumentError` naming it; a missing object (on a read) a
    :class:`NotFoundError`; anything else a :class:`DataLossError`, or a :class:`WriteError`
    when ``doing`` is "write" or "delete". The caller raises it ``from exc``.

    Examples:
        >>> error = translate("s3://b/ckpt-1.index", "checkpoint index", TimeoutError("no answer"))
        >>> type(error).__name__, error.path
        ('DeadlineExceededError', 's3://b/ckpt-1.index')
    """
    writing = doing in ("write", "delete")
    if isinstance(exc, CheckpointError):
        return exc
    if _timed_out(exc):
        return _deadline(url, what, exc, doing)
    if _unreachable(exc):
        return _unavailable(url, what, exc, doing)
    option = _unknown_option(url, exc)
    if option is not None:
        return InvalidArgumentError(
            f"{url}: the storage option {option} is not one the URL's fsspec backend takes ({exc}); fix it in the "
            "storage_options given for this URL, or in those set with tp.set_storage_options (for s3://, s3fs's "
            "options: endpoint_url, key, secret, anon, client_kwargs, config_kwargs, ...)",
            path=url,
        )
    if _denied(exc):
        return PermissionDeniedError(
            f"{url}: permission denied: cannot {doing} the {what} ({exc}). Check the credentials this URL uses (key "
            "and secret, or a profile, in its storage_options or tp.set_storage_options, else AWS_ACCESS_KEY_ID / "
            f"AWS_SECRET_ACCESS_KEY or the machine's role) and that they may {doing} objects there",
            path=url,
        )
    if writing:
        return WriteError(f"{url}: could not {doing} the {what}: {exc}", path=url)
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"{url}: no such {what}", path=url)
    return DataLossError(f"{url}: cannot {doing} the {what}: {exc}", path=url)


def _deadline(url: str, what: str, exc: BaseException, doing: str) -> DeadlineExceededError:
    unknown = ""
    if doing in ("write", "delete"):
        unknown = " Whether it took effect is unknown (a checkpoint is committed only once its .index is there)."
    return DeadlineExceededError(
        f"{url}: the object store did not answer in time to {doing} the {what} ({exc}), after the retries its "
        f"client is configured with.{unknown} Check that the endpoint (endpoint_url) is up and reachable from here, "
        "or give it longer: storage option config_kwargs={'read_timeout': seconds, 'retries': {'max_attempts': n}} "
        "(botocore's defaults: 60 s, and 5 attempts within each of s3fs's retries=5)",
        path=url,
    )


def _unavailable(url: str, what: str, exc: BaseException, doing: str) -> UnavailableError:
    committed = " A checkpoint is committed only once its .index is there." if doing in ("write", "delete") else ""
    return UnavailableError(
        f"{url}: could not connect to the object store at {_endpoint(url)} to {doing} the {what} ({exc}), after the "
        f"retries its client is configured with.{committed} Check that this is the endpoint the URL should use "
        "(storage option endpoint_url, in the storage_options given for it or tp.set_storage_options, else "
        "fsspec's FSSPEC_S3_ENDPOINT_URL) and that the server there is running and reachable from here",
        path=url,
    )


def _endpoint(url: str) -> str:
    """The endpoint the URL's options name (``endpoint_url``, or in ``client_kwargs``), else a description."""
    given = _given(url)
    nested = given.get("client_kwargs")
    endpoint = given.get("endpoint_url") or (nested.get("endpoint_url") if isinstance(nested, Mapping) else None)
    return str(endpoint) if endpoint else "its client's default endpoint (no endpoint_url is set for it)"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _named(exc: BaseException, names: frozenset[str]) -> bool:
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def _timed_out(exc: BaseException) -> bool:
    return any(isinstance(e, TimeoutError) or _named(e, _TIMEOUT_NAMES) for e in _chain(exc))


def _unreachable(exc: BaseException) -> bool:
    return any(isinstance(e, ConnectionRefusedError) or _named(e, _UNREACHABLE_NAMES) for e in _chain(exc))


def _denied(exc: BaseException) -> bool:
    return any(isinstance(e, PermissionError) or _named(e, _NO_CREDENTIALS_NAMES) for e in _chain(exc))


def _unknown_option(url: str, exc: BaseException) -> str | None:
    """The option, as ``name`` or ``name['inner']``, that a ``TypeError`` in ``exc``'s chain
    says the backend does not take; None when it names none the URL was given."""
    for error in _chain(exc):
        found = _UNEXPECTED_KEYWORD.search(str(error)) if isinstance(error, TypeError) else None
        if found is not None:
            return _find_option(_given(url), found.group(1))
    return None


def _given(url: str) -> Mapping[str, Any]:
    """The options a URL's filesystem was made with: trackpoint's for it over fsspec's configuration."""
    scheme = url.partition("://")[0]
    try:
        import fsspec.config

        configured = dict(fsspec.config.conf.get(scheme, {}))
    except ImportError:
        configured = {}
    return {**configured, **options_for(url)}


def _find_option(options: Mapping[str, Any], name: str) -> str | None:
    """Where ``name`` is among ``options``: a key, or a key of a mapping one of them holds
    (``client_kwargs``, ``config_kwargs``). Only names are shown: values may be secrets."""
    if name in options:
        return repr(name)
    for key, value in options.items():
        if isinstance(value, Mapping) and name in value:
            return f"{key}[{name!r}]"
    return None
