"""What an untrusted index entry must satisfy before anything is allocated or read for it: one list of rules.

Each :class:`Rule` states one fact in two forms: a scalar predicate over one
:class:`~trackpoint._format.entries.Entry` (single reads, listings) and a vectorized one
over :class:`Rows`, the numpy columns of many entries (batched reads). The error class and
message come from the rule, and only the scalar form raises: a batched read checks every
row with the vectorized forms, and sends the rows they refuse through the scalar ones,
which word the error. So a rule cannot exist in one path and not the other, and a
vectorized form may be stricter than its scalar form, never looser.

Rules run by :class:`Stage`, in the order of :data:`RULES`: what the index alone says
(checked for every entry listed or read), what a value's dtype and size must agree on
(before a value is read), and what its data file must hold (before its bytes are read).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from trackpoint._format.dtypes import ITEMSIZE_BY_ENUM, READABLE_BY_ENUM, STRING, enum_name
from trackpoint._format.entries import Entry
from trackpoint._format.entry_columns import EntryColumns, distinct
from trackpoint._format.slices import readable_key
from trackpoint.errors import CheckpointError, DataLossError, InvalidArgumentError

__all__ = [
    "ENTRY_RULES",
    "MAX_RANK",
    "READ_RULES",
    "RULES",
    "VALUE_RULES",
    "Context",
    "Rows",
    "Rule",
    "Stage",
    "check",
    "of_stages",
    "passing",
]

MAX_RANK = 254  # TensorShape::MaxDimensions
_EXACT = float(1 << 53)  # element counts below this are exact as float64


class Stage(enum.Enum):
    """When a rule is checked."""

    ENTRY = "entry"  # whatever the entry is used for: listed, described or read
    VALUE = "value"  # before its value is read
    FILE = "file"  # before its bytes are read from its data file (unsliced entries only)


class Context(Protocol):
    """What the rules need to know of the checkpoint: names for messages, and its data files."""

    @property
    def prefix(self) -> str: ...

    @property
    def index_path(self) -> str: ...

    @property
    def num_shards(self) -> int: ...

    def file_size(self, shard_id: int, key: str) -> int:
        """The size of a data shard (opening it; NotFoundError naming ``key`` if it is missing)."""
        ...

    def data_path(self, shard_id: int) -> str: ...

    def damaged(self, path: str, key: str, message: str) -> CheckpointError:
        """The error for bytes of ``path`` that disagree with the index."""
        ...


@dataclass(frozen=True)
class Rows:
    """Entries checked together: their columns, keys, and what several rules derive from them.

    Only rows where ``columns.plain`` holds mean anything; the others are zeros.
    """

    columns: EntryColumns
    keys: Sequence[str]
    readable: np.ndarray  # the dtype is one trackpoint reads
    itemsize: np.ndarray  # 0 for strings and unreadable dtypes
    elements: np.ndarray  # element count as float64 (exact below 2**53)
    in_rank: np.ndarray  # (n, max rank): True where the dimension exists

    @classmethod
    def of(cls, columns: EntryColumns, keys: Sequence[str]) -> Rows:
        dtype = np.clip(columns.dtype, 0, len(ITEMSIZE_BY_ENUM) - 1)
        in_table = columns.dtype == dtype
        in_rank = np.arange(columns.dims.shape[1])[None, :] < columns.ndim[:, None]
        elements = np.prod(np.where(in_rank, columns.dims, 1).astype(np.float64), axis=1)
        readable = READABLE_BY_ENUM[dtype] & in_table
        return cls(columns, keys, readable, np.where(in_table, ITEMSIZE_BY_ENUM[dtype], 0), elements, in_rank)


@dataclass(frozen=True)
class Rule:
    """One fact an entry must satisfy, in its scalar and its vectorized form, with its error.

    Attributes:
        name: Names the rule in tests and reports.
        stage: When it is checked.
        error: The error class raised when it fails.
        holds: Whether one entry satisfies it.
        holds_rows: Per row, whether it holds, given the rows still ``candidates`` (a rule
            that opens data files opens only theirs); may refuse more rows than ``holds``.
        message: What is wrong with an entry that fails it.
        in_data_file: The failure is in what a data file holds, so the error goes through
            :meth:`Context.damaged` (which tells a checkpoint replaced while read).
    """

    name: str
    stage: Stage
    error: type[CheckpointError]
    holds: Callable[[Entry, Context], bool]
    holds_rows: Callable[[Rows, np.ndarray, Context], np.ndarray]
    message: Callable[[Entry, Context], str]
    in_data_file: bool = False

    def failure(self, entry: Entry, context: Context) -> CheckpointError:
        """The error for ``entry``, which fails this rule."""
        message = self.message(entry, context)
        if self.in_data_file:
            return context.damaged(context.data_path(entry.shard_id), entry.key, message)
        return self.error(message, path=context.index_path, key=entry.key)


def _key(entry: Entry) -> str:
    return repr(readable_key(entry.key))


def _file_holds(rows: Rows, candidates: np.ndarray, context: Context) -> np.ndarray:
    """Vectorized span rule: opens only the shards of candidate rows, one row's key naming each."""
    columns = rows.columns
    ok = (columns.offset >= 0) & (columns.size >= 0)
    opened = candidates & ok & (columns.shard_id >= 0) & (columns.shard_id < context.num_shards)
    for shard_id in distinct(columns.shard_id[opened]):
        in_shard = columns.shard_id == shard_id
        file_size = context.file_size(shard_id, rows.keys[int(np.argmax(opened & in_shard))])
        ok[in_shard] &= columns.offset[in_shard] + columns.size[in_shard] <= file_size
    return ok


def _span_holds(entry: Entry, context: Context) -> bool:
    if entry.offset < 0 or entry.size < 0:
        return False
    return entry.offset + entry.size <= context.file_size(entry.shard_id, entry.key)


def _size_message(entry: Entry, context: Context) -> str:
    name, itemsize = (entry.dtype.name, entry.dtype.itemsize) if entry.dtype is not None else ("?", 0)
    return (
        f"{context.index_path}: invalid size in bundle entry {_key(entry)}: shape {list(entry.shape)} of "
        f"{name} needs {math.prod(entry.shape) * itemsize} bytes but the entry holds {entry.size}"
    )


RULES: tuple[Rule, ...] = (
    Rule(
        name="rank",
        stage=Stage.ENTRY,
        error=DataLossError,
        holds=lambda e, c: len(e.shape) <= MAX_RANK,
        holds_rows=lambda r, m, c: np.less_equal(r.columns.ndim, MAX_RANK),
        message=lambda e, c: f"{c.index_path}: key {_key(e)} has an invalid shape",
    ),
    Rule(
        name="non-negative dimensions",
        stage=Stage.ENTRY,
        error=DataLossError,
        holds=lambda e, c: not e.shape or min(e.shape) >= 0,
        holds_rows=lambda r, m, c: ~np.any(r.in_rank & (r.columns.dims < 0), axis=1),
        message=lambda e, c: f"{c.index_path}: key {_key(e)} has a negative dimension in {list(e.shape)}",
    ),
    Rule(
        name="readable dtype",
        stage=Stage.VALUE,
        error=InvalidArgumentError,
        holds=lambda e, c: e.dtype is not None,
        holds_rows=lambda r, m, c: r.readable,
        message=lambda e, c: (
            f"{c.prefix}: key {_key(e)} has dtype {enum_name(e.dtype_enum)}, which trackpoint cannot convert to numpy"
        ),
    ),
    Rule(
        name="size of a numeric tensor",
        stage=Stage.VALUE,
        error=DataLossError,
        holds=lambda e, c: (
            e.dtype is None or e.dtype.is_string or e.is_sliced or math.prod(e.shape) * e.dtype.itemsize == e.size
        ),
        holds_rows=lambda r, m, c: (
            (r.itemsize == 0) | ((r.elements < _EXACT) & (r.elements * r.itemsize == r.columns.size))
        ),
        message=_size_message,
    ),
    Rule(
        name="strings fit their bytes",
        stage=Stage.VALUE,
        error=DataLossError,
        # every string needs at least one byte for its length
        holds=lambda e, c: e.dtype is not STRING or e.is_sliced or math.prod(e.shape) <= e.size,
        holds_rows=lambda r, m, c: (r.columns.dtype != STRING.enum) | (r.elements <= r.columns.size),
        message=lambda e, c: f"{c.index_path}: key {_key(e)} declares {math.prod(e.shape)} strings in {e.size} bytes",
    ),
    Rule(
        name="shard id",
        stage=Stage.FILE,
        error=DataLossError,
        holds=lambda e, c: 0 <= e.shard_id < c.num_shards,
        holds_rows=lambda r, m, c: (r.columns.shard_id >= 0) & (r.columns.shard_id < c.num_shards),
        message=lambda e, c: (
            f"{c.index_path}: key {_key(e)} names data shard {e.shard_id} but the header declares {c.num_shards}"
        ),
    ),
    Rule(
        name="bytes inside the data file",
        stage=Stage.FILE,
        error=DataLossError,
        holds=_span_holds,
        holds_rows=_file_holds,
        message=lambda e, c: (
            f"{c.data_path(e.shard_id)}: key {_key(e)} spans bytes [{e.offset}, {e.offset + e.size}) but the file "
            f"holds {c.file_size(e.shard_id, e.key)}; the data file is truncated or the index is damaged"
        ),
        in_data_file=True,
    ),
)


def of_stages(*stages: Stage) -> tuple[Rule, ...]:
    """The rules of ``stages``, in the order of :data:`RULES`."""
    return tuple(rule for rule in RULES if rule.stage in stages)


#: The rules an entry is checked against whatever it is used for; before its value is read
#: (sliced entries); before its bytes are read from its data file (unsliced entries). Picked
#: once here, not per call: a loop of single reads checks every entry.
ENTRY_RULES = of_stages(Stage.ENTRY)
VALUE_RULES = of_stages(Stage.VALUE)
READ_RULES = of_stages(Stage.VALUE, Stage.FILE)


def check(entry: Entry, context: Context, rules: tuple[Rule, ...]) -> None:
    """Raise the error of the first of ``rules`` that ``entry`` fails.

    Raises:
        CheckpointError: The error of that rule (see :meth:`Rule.failure`).
    """
    for rule in rules:
        if not rule.holds(entry, context):
            raise rule.failure(entry, context)


def passing(rows: Rows, candidates: np.ndarray, context: Context) -> np.ndarray:
    """The candidate rows (plain ones only) that every rule holds for, all stages."""
    ok = candidates & rows.columns.plain
    for rule in RULES:
        ok &= rule.holds_rows(rows, ok, context)
    return ok
