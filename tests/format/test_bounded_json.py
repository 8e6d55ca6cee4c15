"""``bounded_json``: the nesting bound on every JSON trackpoint writes or reads, measured without recursion.

The text measure (a fast path over string operations) is checked against the plain path, a
recursive walk of the parsed value, on values of every kind with strings full of brackets,
quotes and backslashes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trackpoint._format import bounded_json
from trackpoint._format.bounded_json import MAX_JSON_DEPTH
from trackpoint.errors import InvalidArgumentError

_TRICKY = st.text(alphabet='[]{}"\\:,ab \n\u00e9\U0001f600', max_size=20)
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TRICKY
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TRICKY, inner, max_size=3),
    max_leaves=20,
)


def _depth(value: Any) -> int:
    """The plain path: depth by recursion (the values here are shallow enough for it)."""
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


def _wrapped(value: Any, levels: int, keys: list[str]) -> Any:
    for i in range(levels):
        value = {keys[i % len(keys)]: value} if i % 3 == 0 and keys else [value]
    return value


@pytest.mark.slow  # random nested values (hypothesis): seconds
@settings(max_examples=300, deadline=None)
@given(value=_VALUES, levels=st.integers(0, MAX_JSON_DEPTH + 20), keys=st.lists(_TRICKY, max_size=3))
def test_the_text_measure_agrees_with_the_depth_of_the_value(value: Any, levels: int, keys: list[str]) -> None:
    value = _wrapped(value, levels, keys)
    for text in (json.dumps(value), json.dumps(value, indent=1, ensure_ascii=False)):
        if _depth(value) > MAX_JSON_DEPTH:
            with pytest.raises(InvalidArgumentError, match=f"more than {MAX_JSON_DEPTH} levels deep"):
                bounded_json.loads(text, "x")
        else:
            assert bounded_json.loads(text, "x") == json.loads(text)
            assert bounded_json.loads(text.encode("utf-16"), "x") == json.loads(text)  # decoded as json.loads does
    if _depth(value) > MAX_JSON_DEPTH:
        with pytest.raises(InvalidArgumentError):
            bounded_json.dumps(value, "x")
    else:
        assert bounded_json.dumps(value, "x") == json.dumps(value)


@pytest.mark.parametrize(("open_", "close"), [("[", "]"), ('{"k":', "}")])
def test_the_bound_is_inclusive(open_: str, close: str) -> None:
    at = open_ * MAX_JSON_DEPTH + "1" + close * MAX_JSON_DEPTH
    assert _depth(bounded_json.loads(at, "x")) == MAX_JSON_DEPTH
    with pytest.raises(InvalidArgumentError, match="state: its JSON nests"):
        bounded_json.loads(open_ + at + close, "state")
    value: Any = 1
    for _ in range(MAX_JSON_DEPTH):
        value = [value]
    assert bounded_json.dumps(value, "x") == at.replace('{"k":', "[").replace("}", "]")
    with pytest.raises(InvalidArgumentError, match="state: its lists, tuples and dicts nest more than 128"):
        bounded_json.dumps([value], "state")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,  # unclosed: json.loads recursed into every one
        '{"a":' * 100_000,
        "[" * 100_000 + "]" * 100_000,
        '["\\\\"' + ", [" * 200,  # an escaped backslash closes nothing: the string ends, the arrays count
        "[" * 200 + '"',  # unterminated string after the arrays
        '"' + '\\"' * 100_000 + '"' + "[" * 200,  # a long string of escaped quotes, then arrays
    ],
)
def test_hostile_text_is_refused_not_recursed(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="more than 128 levels deep"):
        bounded_json.loads(text, "x")
    with pytest.raises(InvalidArgumentError):
        bounded_json.loads(text.encode(), "x")


@pytest.mark.parametrize(
    "text",
    [
        json.dumps("[" * 100_000),  # brackets in a string do not nest
        json.dumps(["\\" * 7 + '"' + "[" * 500]),  # nor after escaped backslashes and an escaped quote
        '"' + '\\"' * 100_000 + "[" * 200,  # unterminated: malformed, not deep (the arrays are inside the string)
    ],
)
def test_brackets_inside_strings_do_not_count(text: str) -> None:
    try:
        assert bounded_json.loads(text, "x") == json.loads(text)
    except InvalidArgumentError:
        pytest.fail("brackets inside a string were counted")
    except ValueError:
        pass  # malformed: json.loads's own error, as before


def test_a_value_that_contains_itself_is_refused_not_recursed() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(InvalidArgumentError, match="or it contains itself"):
        bounded_json.dumps({"state": cycle}, "x")
    with pytest.raises(InvalidArgumentError):
        bounded_json.check_depth((cycle,), "x")


def test_a_larger_bound_when_the_depth_is_bounded_otherwise() -> None:
    value: Any = 0
    for _ in range(200):
        value = [value]
    with pytest.raises(InvalidArgumentError, match="more than 128"):
        bounded_json.dumps(value, "x")
    assert bounded_json.dumps(value, "x", max_depth=258) == json.dumps(value)


def test_options_pass_through() -> None:
    pairs = bounded_json.loads('{"b": 1, "a": 2}', "x", object_pairs_hook=list)
    assert pairs == [("b", 1), ("a", 2)]
    assert bounded_json.dumps({"b": 1, "a": 2}, "x", sort_keys=True, separators=(",", ":")) == '{"a":2,"b":1}'
    with pytest.raises(ValueError):
        bounded_json.loads("{not json", "x")
