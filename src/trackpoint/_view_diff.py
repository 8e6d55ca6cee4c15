"""The diff of ``tp.CheckpointView``: a checkpoint against live objects (TF's) or another checkpoint (ours).

Against live objects, TF's triple: the nodes matched to objects, the nodes only in the
checkpoint, the objects only in the live graph. Against another checkpoint, a
:class:`CheckpointDiff` of structure, dtypes, shapes and values at the same object paths,
values compared as ``numpy.isclose`` does (wide floats, NaN equal to NaN).

The example is :class:`ValueChange`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph.live import breadth_first
from trackpoint._tracking.base import Trackable
from trackpoint.errors import InvalidArgumentError

__all__ = ["CheckpointDiff", "ObjectDiff", "ValueChange", "check_tolerances", "diff_checkpoints", "diff_objects"]

#: ``(object path, attribute name)`` -> checkpoint key of every value a checkpoint's graph describes.
Values = dict[tuple[str, str], str]


@dataclass(frozen=True)
class ValueChange:
    """One difference between two checkpoints' values at the same path.

    Attributes:
        path: The object path, e.g. ``(root).model.kernel`` (slots as ``... 's state 'm' for ...``).
        attribute: The attribute name, usually ``VARIABLE_VALUE``.
        kind: ``"dtype"``, ``"shape"`` or ``"value"``.
        detail: Human-readable before → after.
        max_abs_diff: For ``"value"`` changes of numbers, the largest absolute difference.

    Examples:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> root = tp.Module()
        >>> root.w = tp.Variable([1.0, 2.0])
        >>> directory = tempfile.mkdtemp()
        >>> before = tp.Checkpoint(root).write(directory + "/before")
        >>> _ = root.w.assign([1.0, 2.5])
        >>> with tp.CheckpointView(before) as view:
        ...     (change,) = view.diff(tp.Checkpoint(root).write(directory + "/after")).changed
        >>> change
        ValueChange(path='(root).w', attribute='VARIABLE_VALUE', kind='value',
                    detail='1 of 2 elements differ', max_abs_diff=0.5)
    """

    path: str
    attribute: str
    kind: str
    detail: str
    max_abs_diff: float | None = None


@dataclass(frozen=True)
class CheckpointDiff:
    """The node-by-node comparison of two checkpoints (``CheckpointView.diff(other)``).

    Attributes:
        added: Object paths holding values only in the other checkpoint.
        removed: Object paths holding values only in this checkpoint.
        changed: Differences in dtype, shape or value at paths both hold, largest first.

    Examples:
        >>> import tempfile
        >>> import trackpoint as tp
        >>> root = tp.Module()
        >>> root.w = tp.Variable([1.0, 2.0])
        >>> directory = tempfile.mkdtemp()
        >>> before = tp.Checkpoint(root).write(directory + "/before")
        >>> root.b = tp.Variable(0.0)
        >>> after = tp.Checkpoint(root).write(directory + "/after")
        >>> with tp.CheckpointView(before) as view:
        ...     result = view.diff(after)
        >>> result.equal, result.added, result.removed, result.changed
        (False, ('(root).b',), (), ())
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[ValueChange, ...] = field(default_factory=tuple)

    @property
    def equal(self) -> bool:
        """True when nothing was added, removed or changed."""
        return not (self.added or self.removed or self.changed)


ObjectDiff = tuple[dict[int, Trackable], list[int], list[Trackable]]
"""TF's ``CheckpointView.diff(obj)``: matched nodes, nodes only in the checkpoint, objects only in ``obj``."""


def diff_objects(matched: dict[int, Trackable], descendants: Iterable[int], obj: Trackable) -> ObjectDiff:
    """TF's triple, given the view's :meth:`~trackpoint.CheckpointView.match` of ``obj`` and its
    node ids reachable from the root (:meth:`~trackpoint.CheckpointView.descendants`)."""
    only_in_checkpoint = [i for i in descendants if i not in matched]
    matched_ids = {id(t) for t in matched.values()}
    # Every object reachable from obj, breadth first as TF numbers them.
    only_in_trackable = [t for t in breadth_first(obj, {}).nodes if id(t) not in matched_ids]
    return matched, only_in_checkpoint, only_in_trackable


def check_tolerances(rtol: float, atol: float) -> None:
    """Raise unless ``rtol`` and ``atol`` are finite and not negative (``numpy.isclose`` would
    only warn about them, then call every value close)."""
    for name, tolerance in (("rtol", rtol), ("atol", atol)):
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise InvalidArgumentError(f"diff: {name}={tolerance!r} is not a tolerance; give a finite number >= 0")


def diff_checkpoints(
    mine: Values,
    my_reader: BundleReader,
    theirs: Values,
    their_reader: BundleReader,
    rtol: float,
    atol: float,
    progress: Callable[[int, int], None] | None,
) -> CheckpointDiff:
    """The :class:`CheckpointDiff` of two checkpoints' values (``progress(done, total)`` after each compared)."""
    removed = sorted({path for path, _ in mine} - {path for path, _ in theirs})
    added = sorted({path for path, _ in theirs} - {path for path, _ in mine})
    changed: list[ValueChange] = []
    for done, ((path, attribute), key) in enumerate(mine.items(), 1):
        if progress is not None:
            progress(done, len(mine))
        other_key = theirs.get((path, attribute))
        if other_key is None:
            if path not in removed:
                changed.append(ValueChange(path, attribute, "value", "attribute only in the first checkpoint"))
            continue
        change = _compare(path, attribute, my_reader, key, their_reader, other_key, rtol, atol)
        if change is not None:
            changed.append(change)
    for path, attribute in theirs.keys() - mine.keys():
        if path not in added:
            changed.append(ValueChange(path, attribute, "value", "attribute only in the second checkpoint"))
    changed.sort(key=lambda c: (-(c.max_abs_diff if c.max_abs_diff is not None else math.inf), c.path))
    return CheckpointDiff(tuple(added), tuple(removed), tuple(changed))


def _compare(
    path: str,
    attribute: str,
    a_reader: BundleReader,
    a_key: str,
    b_reader: BundleReader,
    b_key: str,
    rtol: float,
    atol: float,
) -> ValueChange | None:
    a_entry, b_entry = a_reader.entry(a_key), b_reader.entry(b_key)
    if a_entry.dtype_enum != b_entry.dtype_enum:
        a_name = a_entry.dtype.name if a_entry.dtype else a_entry.dtype_enum
        b_name = b_entry.dtype.name if b_entry.dtype else b_entry.dtype_enum
        return ValueChange(path, attribute, "dtype", f"{a_name} -> {b_name}")
    if a_entry.shape != b_entry.shape:
        return ValueChange(path, attribute, "shape", f"{list(a_entry.shape)} -> {list(b_entry.shape)}")
    a, b = a_reader.read(a_key), b_reader.read(b_key)
    if isinstance(a, bytes) or np.asarray(a).dtype == object:
        if np.asarray(a, dtype=object).tolist() != np.asarray(b, dtype=object).tolist():
            return ValueChange(path, attribute, "value", "strings differ")
        return None
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if a_arr.dtype.kind in "fcV":  # V: ml_dtypes' bfloat16 and float8
        wide = np.complex128 if a_arr.dtype.kind == "c" else np.float64
        x, y = a_arr.astype(wide), b_arr.astype(wide)
        close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    else:
        x, y = a_arr.astype(np.float64), b_arr.astype(np.float64)
        close = (a_arr == b_arr) if (rtol == 0 and atol == 0) else np.isclose(x, y, rtol=rtol, atol=atol)
    if bool(np.all(close)):
        return None
    diff = np.abs(x - y)
    worst = float(np.nanmax(np.where(close, 0, diff))) if diff.size else 0.0
    count = int(np.size(close) - np.count_nonzero(close))
    return ValueChange(path, attribute, "value", f"{count} of {np.size(close)} elements differ", worst)
