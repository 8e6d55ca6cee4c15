"""Name rules of a conversion: which tensors go, under which names, transposed or not.

A rule set is applied to every source tensor's default name (its object path such as
``model.dense.kernel``, or the name in the source file) in this order:

1. ``only``: if any patterns are given, a tensor whose name none of them matches is left out;
2. ``drop``: a tensor whose name one of them matches is left out;
3. ``transpose``: a tensor whose name one matches is transposed (2-D only: TF's ``[in, out]``
   kernels to torch's ``[out, in]``);
4. ``rename``: each ``(regex, replacement)`` in turn, as :func:`re.sub` does.

``rename`` is one ``'REGEX=REPLACEMENT'`` string, a dict ``{regex: replacement}``, or a list
(or tuple) of rules, each a ``'REGEX=REPLACEMENT'`` string or a ``(regex, replacement)`` pair.
A bare tuple is always a sequence of rules, never one pair: ``('^model\\.=', 'kernel$=weight')``
would read as either, so one pair is spelled ``[(regex, replacement)]`` or ``{regex: replacement}``.

Patterns use Python's :mod:`re` syntax and match anywhere in the name (:func:`re.search`);
``only``, ``drop`` and ``transpose`` look at the name before renaming. Two tensors renamed to
one name are an error naming both.

Examples:
    >>> rules = NameRules.make(rename=[r"^model\\.=", r"kernel$=weight"], drop=["optimizer"], transpose=["kernel$"])
    >>> rules.apply("model.dense.kernel", (3, 4))
    ('dense.weight', True)
    >>> rules.apply("optimizer.iter", ()) is None
    True
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trackpoint.errors import InvalidArgumentError

__all__ = ["MappingRow", "NameRules", "RenameRules", "check_conflicts", "mapping_table", "parse_rename"]

RenameSpec = str | tuple[str, str]
# What ``rename=`` takes: one rule string, rules in order, or a dict (see the module docstring).
RenameRules = str | Iterable[RenameSpec] | Mapping[str, str]


def parse_rename(spec: RenameSpec) -> tuple[str, str]:
    """A rename rule as ``(regex, replacement)``, from ``'REGEX=REPLACEMENT'`` or a pair.

    The first ``=`` that is not preceded by a backslash splits the rule, so a regex may hold
    ``\\=`` for a literal ``=``.

    Examples:
        >>> parse_rename(r"^model\\.(.*)=\\1"), parse_rename(("a", "b"))
        (('^model\\\\.(.*)', '\\\\1'), ('a', 'b'))

    Raises:
        InvalidArgumentError: No ``=``, or a regex that does not compile.
    """
    if isinstance(spec, tuple):
        if len(spec) != 2 or not all(isinstance(s, str) for s in spec):
            raise InvalidArgumentError(f"rename rule {spec!r}: give a (regex, replacement) pair of str")
        pattern, replacement = spec
    elif isinstance(spec, str):
        match = re.search(r"(?<!\\)=", spec)
        if match is None:
            raise InvalidArgumentError(
                f"rename rule {spec!r} has no '=': write it as 'REGEX=REPLACEMENT', e.g. '^model\\.=' to strip a prefix"
            )
        pattern, replacement = spec[: match.start()].replace(r"\=", "="), spec[match.end() :]
    else:
        raise InvalidArgumentError(f"rename rule {spec!r}: give 'REGEX=REPLACEMENT' or a (regex, replacement) pair")
    compiled = _compile(pattern, "rename")
    try:
        compiled.sub(replacement, "")
    except (re.error, IndexError) as exc:
        raise InvalidArgumentError(f"rename rule {spec!r}: bad replacement {replacement!r}: {exc}") from None
    return pattern, replacement


def _parse_listed(spec: RenameSpec, given: object) -> tuple[str, str]:
    """One rule of ``rename=``; the remedy for a pair given bare names the way to spell one."""
    try:
        return parse_rename(spec)
    except InvalidArgumentError as exc:
        if isinstance(given, tuple) and isinstance(spec, str):
            raise InvalidArgumentError(
                f"{exc}. rename={given!r} is read as {len(given)} 'REGEX=REPLACEMENT' rules; for one "
                f"(regex, replacement) pair write [{given!r}] or {{{given[0]!r}: {given[-1]!r}}}"
            ) from None
        raise


def _compile(pattern: object, option: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise InvalidArgumentError(f"{option} pattern {pattern!r} is not a str")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidArgumentError(f"{option} pattern {pattern!r} is not a valid regular expression: {exc}") from None


def _patterns(value: str | Iterable[str] | None, option: str) -> tuple[re.Pattern[str], ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    return tuple(_compile(item, option) for item in items)


@dataclass(frozen=True)
class NameRules:
    """Compiled name rules; make them with :meth:`make`.

    Attributes:
        rename: ``(compiled regex, replacement)`` pairs, applied in order.
        only: Patterns of which one must match a kept tensor (none given: all kept).
        drop: Patterns of tensors left out.
        transpose: Patterns of tensors transposed.
    """

    rename: tuple[tuple[re.Pattern[str], str], ...] = ()
    only: tuple[re.Pattern[str], ...] = ()
    drop: tuple[re.Pattern[str], ...] = ()
    transpose: tuple[re.Pattern[str], ...] = ()

    @classmethod
    def make(
        cls,
        rename: RenameRules | None = None,
        only: str | Iterable[str] | None = None,
        drop: str | Iterable[str] | None = None,
        transpose: str | Iterable[str] | None = None,
    ) -> NameRules:
        """Rules from the options of :func:`trackpoint.tools` (or the command line).

        Args:
            rename: A ``'REGEX=REPLACEMENT'`` string, a list or tuple of such strings and
                ``(regex, replacement)`` pairs, or a dict ``{regex: replacement}`` (applied in its
                order). A bare tuple is a sequence of rules, not one pair: write one pair as
                ``[(regex, replacement)]``.
            only: Pattern(s) a tensor's name must match to be kept.
            drop: Pattern(s) of tensors to leave out.
            transpose: Pattern(s) of 2-D tensors to transpose.

        Raises:
            InvalidArgumentError: A malformed rule or pattern.

        Examples:
            >>> NameRules.make(rename={"a": "b"}).apply("xa", ())
            ('xb', False)
        """
        if rename is None:
            specs: list[RenameSpec] = []
        elif isinstance(rename, Mapping):
            specs = list(rename.items())
        elif isinstance(rename, str):
            specs = [rename]
        else:
            # A tuple too: ('^a\\.=', 'b$=c') is two rules, which reading it as one pair turned silently
            # into the regex '^a\\.=' (see the module docstring).
            specs = list(rename)
        pairs = tuple(_parse_listed(spec, rename) for spec in specs)
        return cls(
            rename=tuple((re.compile(p), r) for p, r in pairs),
            only=_patterns(only, "only"),
            drop=_patterns(drop, "drop"),
            transpose=_patterns(transpose, "transpose"),
        )

    def apply(self, name: str, shape: Sequence[int], source: str | None = None) -> tuple[str, bool] | None:
        """``(new name, transposed?)`` for a tensor, or None when it is left out.

        ``source`` (the file or checkpoint the tensor is in) begins any error message.

        Raises:
            InvalidArgumentError: A transpose pattern matches a tensor that is not 2-D, or a
                rename leaves an empty name.
        """
        if self.only and not any(p.search(name) for p in self.only):
            return None
        if any(p.search(name) for p in self.drop):
            return None
        transposed = any(p.search(name) for p in self.transpose)
        where = f"{source}: " if source else ""
        if transposed and len(shape) != 2:
            raise InvalidArgumentError(
                f"{where}--transpose matches {name!r} of shape {list(shape)}, but only 2-D tensors can be "
                "transposed; narrow the pattern (e.g. 'kernel$') or --drop it",
                path=source,
                key=name,
            )
        new = name
        for pattern, replacement in self.rename:
            new = pattern.sub(replacement, new)
        if not new:
            if not name:
                raise InvalidArgumentError(
                    f"{where}a tensor has an empty name, which the destination cannot hold; give it one with "
                    "--rename '^$=NAME' or --drop '^$'",
                    path=source,
                    key=name,
                )
            raise InvalidArgumentError(
                f"{where}the rename rules turn {name!r} into an empty name; adjust them", path=source, key=name
            )
        return new, transposed


@dataclass(frozen=True)
class MappingRow:
    """One line of a conversion's mapping table.

    Attributes:
        source: The source key (TF checkpoint key, or the tensor's name in the safetensors file).
        name: What it is called in the destination (for a TF destination, the dotted object path).
        dtype: Its numpy dtype.
        shape: Its shape in the destination (transposed, if it is).
        transposed: Whether it is transposed.
    """

    source: str
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    transposed: bool = False


def check_conflicts(rows: Iterable[MappingRow], source: str | None = None) -> None:
    """Raise if two sources get one name (``source``, their file or checkpoint, begins the message).

    Raises:
        InvalidArgumentError: Naming both sources and the name.

    Examples:
        >>> a, b = (MappingRow(s, "x", np.dtype("f4"), ()) for s in ("a/1", "a/2"))
        >>> check_conflicts([a, b])
        Traceback (most recent call last):
        ...
        trackpoint.errors.InvalidArgumentError: 'a/1' and 'a/2' would both be named 'x'; ...
    """
    seen: dict[str, str] = {}
    for row in rows:
        other = seen.setdefault(row.name, row.source)
        if other != row.source:
            raise InvalidArgumentError(
                f"{source + ': ' if source else ''}{other!r} and {row.source!r} would both be named {row.name!r}; "
                "change the --rename rules or --drop one of them",
                path=source,
                key=row.source,
            )


def mapping_table(rows: Sequence[MappingRow]) -> str:
    """The mapping table ``--dry-run`` prints: source, name, dtype, shape, transposed.

    Examples:
        >>> print(mapping_table([MappingRow("w/.ATTRIBUTES/VARIABLE_VALUE", "w", np.dtype("f4"), (3, 2), True)]))
        source                        name  dtype    shape  transposed
        w/.ATTRIBUTES/VARIABLE_VALUE  w     float32  [3,2]  yes
    """
    table = [("source", "name", "dtype", "shape", "transposed")]
    for row in rows:
        shape = "[" + ",".join(map(str, row.shape)) + "]"
        table.append((row.source, row.name, str(row.dtype), shape, "yes" if row.transposed else ""))
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table)
