"""Untrusted text (keys, object names, paths) made safe to show on a terminal."""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    r"""``text`` with each non-printable character as its Python escape (``\x1b``, ``\r``, ``\n``, ``\u202e``).

    Backslashes stay as they are, so ordinary names and Windows paths read and copy as typed;
    the point is that nothing a terminal interprets (cursor moves, erasures, line breaks,
    bidi overrides) reaches it, not that the escaping can be undone.

    Examples:
        >>> print(printable("w\x1b[2K\rOK\u202e"))
        w\x1b[2K\rOK\u202e
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
