"""The page of ``trackpoint report``: one self-contained HTML file from the report's data.

The template (``_report_page.html`` beside this module) holds the page's CSS and JavaScript; the
data goes into it as JSON, in a ``<script type="application/json" id="report-data">`` element
that the page's script parses. Nothing is fetched: no fonts, images, scripts or requests, and the
page's Content-Security-Policy allows none (its own script and style are allowed by their hashes,
which :func:`render` computes).

Keys, names and paths come from checkpoints and may be hostile. In the JSON text, ``<``, ``>``
and ``&`` are written as ``\\u003c``, ``\\u003e`` and ``\\u0026`` (and every non-ASCII
character as its ``\\u`` escape), so no ``</script>`` or ``<!--`` can end or bend the element;
the page inserts every string as text, with non-printable characters shown as escapes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
from importlib import resources
from typing import Any

__all__ = ["render"]

_DATA = "__REPORT_DATA__"
_SCRIPT_HASH = "__SCRIPT_HASH__"
_STYLE_HASH = "__STYLE_HASH__"


def _csp_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def _between(text: str, start: str, end: str) -> str:
    at = text.index(start) + len(start)
    return text[at : text.index(end, at)]


@functools.lru_cache(maxsize=1)
def _template() -> tuple[str, str]:
    """The page before and after the data, with the hashes of its style and script filled in."""
    page = resources.files("trackpoint.cli").joinpath("_report_page.html").read_text(encoding="utf-8")
    page = page.replace(_STYLE_HASH, _csp_hash(_between(page, "<style>", "</style>")))
    page = page.replace(_SCRIPT_HASH, _csp_hash(_between(page, "<script>", "</script>")))
    before, _, after = page.partition(_DATA)
    return before, after


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinite floats as the strings ``NaN``, ``Infinity``, ``-Infinity``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _json(data: dict[str, Any]) -> str:
    try:
        text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except ValueError:  # NaN or an infinity somewhere: JSON has no such numbers, the page reads the strings
        text = json.dumps(_finite(data), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    # What could end the script element or open a comment in it; as \u escapes, the same JSON strings.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(data: dict[str, Any]) -> str:
    r"""The whole HTML document of a report: the page's template with ``data`` embedded.

    Args:
        data: The report's data, as ``trackpoint.tools.report.report`` returns it (``title``,
            ``generated``, ``inputs``, ``tree``, ``tensors``, ``diff``). NaN and infinite floats
            are written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.

    Returns:
        The document: UTF-8 text, inline CSS and JavaScript only, that works from a ``file://``
        URL without a network.

    Examples:
        >>> root = {"name": "(root)", "path": "", "kind": "object", "key": None, "dtype": None,
        ...         "shape": None, "bytes": 0, "params": 0, "children": []}
        >>> page = render({"title": "</script><b>", "generated": "trackpoint", "inputs": [],
        ...                "tree": root, "tensors": {}, "diff": None})
        >>> page.startswith("<!DOCTYPE html>"), "</script><b>" in page, r"\u003c/script\u003e\u003cb\u003e" in page
        (True, False, True)
    """
    before, after = _template()
    return before + _json(data) + after
