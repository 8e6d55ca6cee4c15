"""JSON of checkpoint data, with its nesting bounded: the one door for ``json.loads``/``json.dumps``.

Python's ``json`` recurses once per level of nesting, in C, and so does any walk of the value
afterwards: a list nested 100000 deep, saved or read from a file whose JSON string is
``"[" * 100000``, raised ``RecursionError``. Here a value to write is measured first, without
recursion, and text to read is measured before it is parsed (in C-speed string operations, in
time and memory linear in its length), against :data:`MAX_JSON_DEPTH`. Either is refused with
an :class:`~trackpoint.errors.InvalidArgumentError` (a ``ValueError``, so callers that report
malformed JSON of a file as damage report this too, naming the file).

Examples:
    >>> from trackpoint._format import bounded_json
    >>> bounded_json.loads(b'{"lr": [0.1, 0.01]}', "state")
    {'lr': [0.1, 0.01]}
    >>> bounded_json.loads("[" * 100000, "state")
    Traceback (most recent call last):
    trackpoint.errors.InvalidArgumentError: state: its JSON nests lists and objects more than 128 levels deep...
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from trackpoint.errors import InvalidArgumentError

__all__ = ["MAX_JSON_DEPTH", "check_depth", "dumps", "loads"]

MAX_JSON_DEPTH = 128
"""How deep lists, tuples and dicts (JSON arrays and objects) may nest in JSON trackpoint writes
or reads: ``[[1]]`` is 2 deep. State that frameworks keep as JSON nests a few levels (a
scheduler's or an optimizer's ``state_dict`` fewer than ten); 128 is also the bound of Rust's
serde_json. It leaves Python's default recursion limit (1000) room for the recursive walks that
convert such a value (two frames a level) and for the caller's own frames."""

_CHUNK = 1 << 20  # brackets measured at a time: the memory of a measure is bounded, whatever the text
_STEP = np.zeros(256, np.int8)  # per byte: +1 opens an array or object, -1 closes one
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


def check_depth(value: Any, what: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse ``value`` if its lists, tuples and dicts nest deeper than ``max_depth``.

    Measured without recursion, so a value of any depth (or one that contains itself) is
    refused rather than exhausting the stack.

    Args:
        value: What is to be written as JSON (or walked, as JSON is).
        what: What it is, to begin the message with.
        max_depth: :data:`MAX_JSON_DEPTH`, unless the value's depth is bounded otherwise (the
            CLI's JSON listing of tensor values nests as deep as a tensor's rank).

    Raises:
        InvalidArgumentError: It is nested too deep, or contains itself.
    """
    pending = [(value, 1)] if isinstance(value, (list, tuple, dict)) else []
    while pending:
        item, depth = pending.pop()
        if depth > max_depth:
            raise InvalidArgumentError(
                f"{what}: its lists, tuples and dicts nest more than {max_depth} levels deep (or it contains "
                "itself), beyond what trackpoint stores as JSON (trackpoint._format.bounded_json.MAX_JSON_DEPTH); "
                "store the state flatter, e.g. a long chain as one list"
            )
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children if isinstance(child, (list, tuple, dict)))


def dumps(value: Any, what: str, *, max_depth: int = MAX_JSON_DEPTH, **options: Any) -> str:
    """``json.dumps(value, **options)`` once :func:`check_depth` accepts ``value`` (and ``max_depth``).

    Raises:
        InvalidArgumentError: ``value`` nests too deep.
        TypeError, ValueError: As ``json.dumps`` raises them (a value JSON cannot hold).
    """
    check_depth(value, what, max_depth)
    return json.dumps(value, **options)


def loads(text: str | bytes, what: str, **options: Any) -> Any:
    """``json.loads(text, **options)`` once the nesting of ``text`` is measured within bounds.

    Bytes are decoded as ``json.loads`` decodes them (UTF-8, or UTF-16/32 by their BOM).

    Raises:
        InvalidArgumentError: ``text`` nests arrays and objects deeper than :data:`MAX_JSON_DEPTH`.
        ValueError: As ``json.loads`` raises it (not JSON, undecodable bytes).
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    if _too_deep(text):
        raise InvalidArgumentError(
            f"{what}: its JSON nests lists and objects more than {MAX_JSON_DEPTH} levels deep, which trackpoint "
            "never writes (trackpoint._format.bounded_json.MAX_JSON_DEPTH): the data is damaged or was crafted; "
            "use another copy of it"
        )
    return json.loads(text, **options)


def _too_deep(text: str) -> bool:
    """Whether ``json.loads`` would nest deeper than :data:`MAX_JSON_DEPTH` reading ``text``.

    Exact for valid JSON. For invalid JSON, exact up to the point where ``json.loads`` stops
    (before it, both read the text alike); past that point the answer may be yes, which refuses
    as too deep what ``json.loads`` would refuse as malformed.
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False  # too few brackets to nest too deep, in strings or out
    # Brackets inside strings do not nest. In a run of backslashes inside a string each pair is
    # one escaped backslash, an odd one out escapes what follows: without the pairs, and then
    # without the escaped quotes, every quote left opens or closes a string. (A backslash
    # outside a string is invalid JSON, where json.loads stops.)
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(unescaped.split('"')[::2]).encode("utf-8", "surrogatepass")
    depth = 0
    for start in range(0, len(outside), _CHUNK):
        chunk = np.frombuffer(outside, np.uint8, min(_CHUNK, len(outside) - start), start)
        running = np.cumsum(_STEP[chunk], dtype=np.int64)
        if depth + int(running.max()) > MAX_JSON_DEPTH:
            return True
        depth += int(running[-1])
    return False
