"""A tensor one process holds in several slices (``SliceSet``, what ``trackpoint.jax`` saves for an
array spread over devices): written slice by slice, through sharding callbacks too, and planned
over several ranks, where each may hold any number of the slices, none included."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EveryTensorAlone
from trackpoint import sharding
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.slices import SlicedValue, SliceSet, cover_problem, extents_from_proto
from trackpoint.distributed._plan import SHARDED, decide, describe

FULL = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
ROWS = ((0, 2), (2, 3), (5, 1))  # three blocks of rows: (start, length)
KEY = "held/.ATTRIBUTES/value"


def _set(rows=ROWS) -> SliceSet:
    parts = tuple(SlicedValue(FULL[s : s + n], FULL.shape, ((s, n), (0, 4))) for s, n in rows)
    return SliceSet(parts, FULL.shape, FULL.dtype)


class Held(tp.Trackable):
    """Offers its tensor as the slices it holds."""

    def __init__(self, value: SliceSet) -> None:
        self.held = value

    def _serialize_to_tensors(self) -> dict:
        return {"value": self.held}


@pytest.mark.parametrize(
    "callback", [None, sharding.MaxShardSizePolicy(40), EveryTensorAlone()], ids=["one file", "max 40 B", "custom"]
)
def test_each_slice_is_stored_once_and_reads_whole(tmp_path, callback) -> None:
    options = tp.CheckpointOptions(experimental_sharding_callback=callback)
    path = tp.Checkpoint(held=Held(_set())).write(str(tmp_path / "c"), options)
    assert np.array_equal(tp.load_variable(path, KEY), FULL)
    with BundleReader(path) as bundle:
        entry = next(e for e in bundle.entries() if e.key == KEY)
        boxes = sorted(extents_from_proto(p) for p in entry.slices)
    if callback is None or isinstance(callback, EveryTensorAlone):
        assert boxes == [((s, n), (0, 4)) for s, n in ROWS]
    else:  # the policy may cut a slice further, never join, repeat or drop one
        assert cover_problem(FULL.shape, boxes) is None and len(boxes) > 3


def test_slices_that_leave_part_out_are_refused_naming_the_key(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="held/.ATTRIBUTES/value") as raised:
        tp.Checkpoint(held=Held(_set(ROWS[:2]))).write(str(tmp_path / "c"))
    assert "coordinator" in str(raised.value)  # the remedy: save together with the other processes
    assert not list(tmp_path.iterdir())


def test_ranks_holding_any_number_of_slices_are_planned_as_one_sharded_tensor() -> None:
    views = [
        describe("p", [(KEY, _set(ROWS[:2])), ("w", np.ones(3))]),
        describe("p", [(KEY, _set(())), ("w", np.ones(3))]),  # holds none of it
        describe("p", [(KEY, _set(ROWS[2:])), ("w", np.ones(3))]),
    ]
    owners = decide(views, None)
    assert owners[0] == SHARDED and 0 <= owners[1] < 3


@pytest.mark.parametrize(
    ("rows", "problem"),
    [(((0, 3), (2, 3), (5, 1)), "overlap"), (((0, 2), (2, 3)), "cover 20 of its 24")],
    ids=["overlap", "gap"],
)
def test_ranks_whose_slices_do_not_tile_the_tensor_are_refused(rows, problem) -> None:
    views = [describe("p", [(KEY, _set(rows[:1]))]), describe("p", [(KEY, _set(rows[1:]))])]
    with pytest.raises(tp.errors.InvalidArgumentError, match=problem) as raised:
        decide(views, None)
    assert raised.value.key == KEY
    assert "rank 1" in str(raised.value)  # which rank holds which slices


@pytest.mark.parametrize(
    "writer", [None, "process"]
)  # slices are not sent to the writer process: its thread writes them
def test_an_async_save_keeps_the_slices_as_they_were_when_it_returned(tmp_path, writer) -> None:
    live = FULL.copy()
    parts = tuple(SlicedValue(live[s : s + n], FULL.shape, ((s, n), (0, 4))) for s, n in ROWS)
    ckpt = tp.Checkpoint(held=Held(SliceSet(parts, FULL.shape, FULL.dtype)))
    path = ckpt.write(str(tmp_path / "c"), tp.CheckpointOptions(enable_async=True, async_writer=writer))
    live[:] = -1  # the training loop writes its arrays in place as soon as save() returns
    ckpt.sync()
    assert np.array_equal(tp.load_variable(path, KEY), FULL)
