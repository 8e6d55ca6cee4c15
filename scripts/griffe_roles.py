"""A griffe extension for the API reference (``mkdocs.yml``): Sphinx roles in docstrings as code.

The docstrings name other objects the way Sphinx does (``:class:`~trackpoint.errors.WriteError```),
which Markdown would show as it is. Here each becomes inline code of the name it shows:
``WriteError`` for a name given with ``~``, else the whole dotted name.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")


def _as_code(match: re.Match[str]) -> str:
    name = match[2].rsplit(".", 1)[-1] if match[1] else match[2]
    return f"`{name}`"


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite every object's docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_as_code, obj.docstring.value)
