"""A restore reads large values straight into the variables' own arrays, when nothing else holds them.

Copy-on-write stays true (an array handed out, viewed or snapshotted by a pending async save
never changes), and so does all-or-nothing (a damaged tensor, a wrong dtype or shape, a
truncated file leave every variable as it was). Sizes are a few times the default threshold
(``ReadTuning.in_place_bytes``), so the public API is tested as it runs; the format-level
tests pass their own tuning.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import numpy as np
import pytest

import trackpoint as tp
from trackpoint import sharding
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.in_place import InPlace
from trackpoint._format.read_tuning import DEFAULT_TUNING, ReadTuning
from trackpoint._tracking.variables import unshared_value

KEY = "model/vars/{}/.ATTRIBUTES/VARIABLE_VALUE"
# Elements of a float32 variable twice the size from which values are read in place.
BIG = 2 * DEFAULT_TUNING.in_place_bytes // 4


def address(variable: tp.Variable) -> int:
    """Where the variable's array lives (no reference to it is kept)."""
    return variable.read_value().__array_interface__["data"][0]


def model(values: list[np.ndarray]) -> tp.Module:
    m = tp.Module()
    m.vars = [tp.Variable(v) for v in values]
    return m


def old_and_new(count: int = 3, small: int = 2) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Values saved (``count`` large, then ``small`` of 16 elements) and the different ones the model holds."""
    rng = np.random.default_rng(7)
    saved = [rng.standard_normal(BIG).astype(np.float32) for _ in range(count)]
    saved += [rng.standard_normal(16).astype(np.float32) for _ in range(small)]
    held = [v + 1 for v in saved]
    return saved, held


def saved_checkpoint(tmp_path: Any, saved: list[np.ndarray]) -> str:
    return tp.Checkpoint(model=model(saved)).write(str(tmp_path / "ckpt"))


def flip_byte(prefix: str, key: str, where: float = 0.5) -> None:
    """Damage one byte of a tensor's stored bytes (not its index entry)."""
    with BundleReader(prefix) as reader:
        entry = reader.entry(key)
        path = reader.data_path(entry.shard_id)
    with open(path, "r+b") as f:
        f.seek(entry.offset + int(entry.size * where))
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def assert_values(m: tp.Module, expected: list[np.ndarray]) -> None:
    for variable, value in zip(m.vars, expected):
        np.testing.assert_array_equal(variable.numpy(), value)


# -- the public API ----------------------------------------------------------------------------


def test_large_unshared_variables_are_restored_into_their_own_memory(tmp_path) -> None:
    saved, held = old_and_new()
    prefix = saved_checkpoint(tmp_path, saved)
    m = model(held)
    before = [address(v) for v in m.vars]
    status = tp.Checkpoint(model=m).read(prefix)
    status.assert_consumed()
    assert_values(m, saved)
    after = [address(v) for v in m.vars]
    assert after[:3] == before[:3]  # the large ones, in place
    assert all(not v.read_value().flags.writeable for v in m.vars)
    # A repeat of the restore (replaying its bindings) reads in place too.
    m.vars[0].assign(held[0])
    again = address(m.vars[0])
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    assert address(m.vars[0]) == again
    assert_values(m, saved)


def test_a_held_numpy_result_keeps_its_contents(tmp_path) -> None:
    saved, held = old_and_new()
    prefix = saved_checkpoint(tmp_path, saved)
    m = model(held)
    kept = m.vars[0].numpy()
    others = [address(v) for v in m.vars[1:3]]
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    np.testing.assert_array_equal(kept, held[0])
    assert m.vars[0].numpy() is not kept
    assert_values(m, saved)
    assert [address(v) for v in m.vars[1:3]] == others  # unshared: still in place


@pytest.mark.parametrize(
    "hold",
    [
        pytest.param(lambda v: v.numpy()[::2], id="view"),
        pytest.param(lambda v: memoryview(v.numpy()), id="memoryview"),
        pytest.param(lambda v: np.asarray(v), id="asarray"),
        pytest.param(lambda v: [v.read_value()], id="in a list"),
    ],
)
def test_anything_holding_the_array_blocks_writing_it(tmp_path, hold) -> None:
    saved, held = old_and_new(count=1, small=0)
    prefix = saved_checkpoint(tmp_path, saved)
    m = model(held)
    holder = hold(m.vars[0])
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    contents = np.asarray(holder[0] if isinstance(holder, list) else holder)
    expected = held[0][::2] if contents.shape != held[0].shape else held[0]
    np.testing.assert_array_equal(contents, expected)
    assert_values(m, saved)


def test_a_weak_reference_blocks_writing_it(tmp_path) -> None:
    saved, held = old_and_new(count=1, small=0)
    prefix = saved_checkpoint(tmp_path, saved)
    m = model(held)
    ref = weakref.ref(m.vars[0].read_value())
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    assert ref() is None  # the old array went; it was never rewritten under the reference
    assert_values(m, saved)


class Blocking(sharding.ShardingCallback):
    """Every tensor in one shard, once ``go`` is set: holds an async save before it writes anything."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.started = threading.Event()

    @property
    def description(self) -> str:
        return "blocking"

    def __call__(self, shardable_tensors):
        self.started.set()
        assert self.go.wait(30)
        return [{t.checkpoint_key: {t.slice_spec: t.tensor} for t in shardable_tensors}]


def test_a_pending_async_save_writes_the_old_values(tmp_path) -> None:
    saved, held = old_and_new()
    prefix = saved_checkpoint(tmp_path, saved)
    m = model(held)
    ckpt = tp.Checkpoint(model=m)
    blocking = Blocking()
    options = tp.CheckpointOptions(enable_async=True, experimental_sharding_callback=blocking)
    pending = ckpt.write(str(tmp_path / "pending"), options)
    assert blocking.started.wait(30)
    try:
        # Through another Checkpoint: this one's restores wait for its pending save first.
        tp.Checkpoint(model=m).read(prefix).assert_consumed()  # while the save holds its snapshot, unwritten
    finally:
        blocking.go.set()
    ckpt.sync()
    assert_values(m, saved)
    reader = tp.load_checkpoint(pending)
    for i, value in enumerate(held):
        np.testing.assert_array_equal(reader.get_tensor(KEY.format(i)), value)
    # Once the save is done nothing holds the arrays: the next restore is in place again.
    m.vars[0].assign(held[0])
    before = address(m.vars[0])
    ckpt.read(prefix).assert_consumed()
    assert address(m.vars[0]) == before


@pytest.mark.parametrize("damaged", [0, 2, 3], ids=["first large", "last large", "small"])
def test_a_damaged_tensor_changes_no_variable(tmp_path, damaged: int) -> None:
    saved, held = old_and_new()
    prefix = saved_checkpoint(tmp_path, saved)
    flip_byte(prefix, KEY.format(damaged))
    m = model(held)
    before = [address(v) for v in m.vars]
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch") as caught:
        tp.Checkpoint(model=m).read(prefix)
    assert caught.value.key == KEY.format(damaged)
    assert_values(m, held)
    assert [address(v) for v in m.vars] == before


def test_a_damaged_tensor_near_its_end_changes_no_variable(tmp_path) -> None:
    saved, held = old_and_new(count=1, small=0)
    prefix = saved_checkpoint(tmp_path, saved)
    flip_byte(prefix, KEY.format(0), where=0.9999)
    m = model(held)
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch"):
        tp.Checkpoint(model=m).read(prefix)
    assert_values(m, held)


def test_a_truncated_data_file_changes_no_variable(tmp_path) -> None:
    saved, held = old_and_new()
    prefix = saved_checkpoint(tmp_path, saved)
    with BundleReader(prefix) as reader:
        entry = reader.entry(KEY.format(1))
        path = reader.data_path(entry.shard_id)
    os.truncate(path, entry.offset + entry.size // 2)
    m = model(held)
    with pytest.raises(tp.errors.DataLossError):
        tp.Checkpoint(model=m).read(prefix)
    assert_values(m, held)


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda v: np.zeros((2, BIG // 2), np.float32), id="shape"),
        pytest.param(lambda v: np.zeros(BIG, np.float64), id="dtype"),
    ],
)
def test_a_wrong_shape_or_dtype_refuses_with_nothing_changed(tmp_path, wrong) -> None:
    saved, held = old_and_new()
    prefix = saved_checkpoint(tmp_path, saved)
    m = model(held)
    m.vars[2] = tp.Variable(wrong(held[2]))
    current = [v.numpy().copy() for v in m.vars]
    before = [address(v) for v in m.vars]
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"cannot restore checkpoint key model/vars/2/") as caught:
        tp.Checkpoint(model=m).read(prefix)
    assert caught.value.key == KEY.format(2)
    assert_values(m, current)
    assert [address(v) for v in m.vars] == before


def test_restore_on_create_reads_into_the_new_variable(tmp_path) -> None:
    saved, held = old_and_new(count=2, small=0)
    prefix = saved_checkpoint(tmp_path, saved)
    m = tp.Module()
    status = tp.Checkpoint(model=m).read(prefix)
    variables = [tp.Variable(value) for value in held]
    before = [address(v) for v in variables]
    m.vars = variables  # both created at once: one read of two values
    status.assert_consumed()
    assert_values(m, saved)
    assert [address(v) for v in m.vars] == before
    one = tp.Module()
    status = tp.Checkpoint(model=one).read(prefix)
    variable = tp.Variable(held[0])
    start = address(variable)
    one.vars = [variable]  # one value alone (see CheckpointValues.many)
    np.testing.assert_array_equal(variable.numpy(), saved[0])
    assert address(variable) == start
    status.expect_partial()


class Grabber(tp.Trackable):
    """A trackable that, taking its own value, keeps a variable's array (as any code might)."""

    def __init__(self, variable: tp.Variable) -> None:
        self.variable = variable
        self.count = 0
        self.grabbed: Any = None

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {"count": np.int64(self.count)}

    def _restore_from_tensors(self, tensors: dict[str, Any]) -> None:
        self.count = int(tensors["count"])
        self.grabbed = self.variable.numpy()


def test_an_array_taken_while_others_restore_is_not_overwritten(tmp_path) -> None:
    saved, held = old_and_new(count=1, small=0)
    source = model(saved)
    source.grabber = Grabber(source.vars[0])
    source.grabber.count = 5
    prefix = tp.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    m = model(held)
    m.grabber = Grabber(m.vars[0])
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    assert m.grabber.count == 5
    np.testing.assert_array_equal(m.grabber.grabbed, held[0])  # taken before the copy: kept as it was
    assert_values(m, saved)


def test_a_kept_value_is_never_written_in_place(tmp_path) -> None:
    # A value waiting for an object while its files go is held in memory (kept_values); the
    # variable created later takes that very array, which the restore still holds, so a
    # later restore into the variable must leave it alone.
    from trackpoint._graph import kept_values

    saved, held = old_and_new(count=2, small=0)
    path = saved_checkpoint(tmp_path, saved)
    m = tp.Module()
    ckpt = tp.Checkpoint(model=m)
    status = ckpt.read(path)
    ckpt.write(path)  # overwrites the restored prefix before model.vars exists: its values are kept
    m.vars = [tp.Variable(held[0])]  # takes one; the restore lives on, waiting for vars[1]
    np.testing.assert_array_equal(m.vars[0].numpy(), saved[0])
    (restore,) = [r for r in kept_values._restores if r.real_prefix == os.path.realpath(path)]
    kept = restore.values.kept[KEY.format(0)]
    assert kept is m.vars[0].read_value()
    other = tp.Checkpoint(model=model(held[:1])).write(str(tmp_path / "other"))
    tp.Checkpoint(model=m).read(other).assert_consumed()
    np.testing.assert_array_equal(m.vars[0].numpy(), held[0])
    np.testing.assert_array_equal(kept, saved[0])
    m.vars.append(tp.Variable(held[1]))
    np.testing.assert_array_equal(m.vars[1].numpy(), saved[1])
    status.assert_consumed()


# -- who may be overwritten ------------------------------------------------------------------


def test_unshared_value() -> None:
    v = tp.Variable(np.zeros(8, np.float32))
    assert unshared_value(v) is not None
    held = v.numpy()
    assert unshared_value(v) is None
    del held
    assert unshared_value(v) is not None
    view = v.numpy()[1:]
    assert unshared_value(v) is None
    del view
    ref = weakref.ref(v.read_value())
    assert unshared_value(v) is None
    del ref
    assert unshared_value(tp.Variable([b"a", b"b"])) is None  # strings: never
    w = tp.Variable(np.zeros(8, np.float32))
    w._value = np.frombuffer(bytes(32), np.float32)  # a value over a reader's bytes (a small restored one)
    assert unshared_value(w) is None


# -- the format layer --------------------------------------------------------------------------


def _bundle(tmp_path: Any, tensors: dict[str, np.ndarray]) -> str:
    prefix = str(tmp_path / "bundle")
    tp.save_tensors(prefix, tensors)
    return prefix


def _arrays(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for key, value in tensors.items():
        array = np.zeros_like(value)
        array.flags.writeable = False
        out[key] = array
    return out


# Small chunks, two threads: tensors are cut between threads, and checksums combined.
TUNING = ReadTuning(in_place_bytes=1000, chunk_bytes=4096, read_threads=2, parallel_read_bytes=1000)


@pytest.mark.parametrize("sizes", [[10_000], [3_000, 17_000, 5_000], [1_024] * 7], ids=["one", "uneven", "alike"])
def test_read_plan_verifies_then_copies(tmp_path, sizes: list[int]) -> None:
    rng = np.random.default_rng(3)
    tensors = {f"t{i}": rng.standard_normal(n).astype(np.float32) for i, n in enumerate(sizes)}
    tensors["small"] = np.arange(10, dtype=np.int64)
    prefix = _bundle(tmp_path, tensors)
    keys = sorted(tensors)
    outs = _arrays(tensors)
    in_place = InPlace(lambda rows, small: {row: outs[keys[row]] for row in rows})
    with BundleReader(prefix, tuning=TUNING) as reader:
        values = [v for batch in reader.read_batches(keys, 1 << 20, in_place) for v in batch]
        for key, value in zip(keys, values):
            if key == "small":
                np.testing.assert_array_equal(value, tensors[key])
            else:
                assert value is outs[key] and not value.any()  # verified, not yet copied
        in_place.copy({row: outs[keys[row]] for row in in_place.entries})
    assert len(in_place.entries) == len(sizes)
    for key in keys:
        if key == "small":
            continue
        np.testing.assert_array_equal(outs[key], tensors[key])
        assert not outs[key].flags.writeable


def test_read_plan_damage_is_found_before_any_value(tmp_path) -> None:
    tensors = {"a": np.ones(5_000, np.float32), "b": np.full(7_000, 2.0, np.float32)}
    prefix = _bundle(tmp_path, tensors)
    flip_byte(prefix, "b", where=0.7)
    outs = _arrays(tensors)
    in_place = InPlace(lambda rows, small: {row: outs["ab"[row]] for row in rows})
    with BundleReader(prefix, tuning=TUNING) as reader, pytest.raises(tp.errors.DataLossError, match="'b'"):
        list(reader.read_batches(["a", "b"], 1 << 20, in_place))
    assert not outs["a"].any() and not outs["b"].any()


def test_destinations_that_do_not_fit_are_read_as_usual(tmp_path) -> None:
    tensors = {"a": np.ones(5_000, np.float32), "b": np.full(7_000, 2.0, np.float32), "c": np.ones(3_000)}
    prefix = _bundle(tmp_path, tensors)
    shared = np.zeros(5_000, np.float32)
    offered = {
        0: shared,  # offered twice: refused
        1: shared,
        2: np.zeros(3_000, np.float32),  # another dtype
    }
    in_place = InPlace(lambda rows, small: offered)
    with BundleReader(prefix, tuning=TUNING) as reader:
        values = [v for batch in reader.read_batches(["a", "b", "c"], 1 << 20, in_place) for v in batch]
    assert not in_place.entries
    for key, value in zip("abc", values):
        np.testing.assert_array_equal(value, tensors[key])
    assert not shared.any()


def test_a_file_changed_between_the_passes_raises(tmp_path) -> None:
    tensors = {"a": np.ones(5_000, np.float32)}
    prefix = _bundle(tmp_path, tensors)
    outs = _arrays(tensors)
    in_place = InPlace(lambda rows, small: {0: outs["a"]})
    with BundleReader(prefix, tuning=TUNING) as reader:
        list(reader.read_batches(["a"], 1 << 20, in_place))
        with open(reader.data_path(0), "ab") as f:
            f.write(b"x")
        with pytest.raises(tp.errors.DataLossError, match="changed while"):
            in_place.copy({0: outs["a"]})


def test_a_sharded_block_stored_as_one_slice_is_restored_into_its_own_memory_all_or_nothing(tmp_path) -> None:
    """A restore at the layout that saved (each block one stored slice) reads a large block
    into the variable's own array; a block that needs several slices, or one held elsewhere
    too, takes new memory; a damaged slice leaves every block as it was."""
    import torch.distributed as dist

    from trackpoint.distributed import ShardedVariable, TorchCoordinator

    rows, cols = 8, BIG // 4
    full = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    prefix = str(tmp_path / "ckpt")
    key = "model/{}/.ATTRIBUTES/VARIABLE_VALUE"
    store = dist.HashStore()  # two ranks in threads of this process, each saving rows [4r, 4r + 4)
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        m = tp.Module()
        m.a, m.b = (ShardedVariable(full[4 * r : 4 * r + 4], full.shape, (4 * r, 0)) for _ in range(2))
        options = tp.CheckpointOptions(coordinator=TorchCoordinator(store=store, rank=r, world_size=2, timeout=30))
        try:
            tp.Checkpoint(model=m).write(prefix, options)
        except BaseException as exc:  # noqa: BLE001 - raised below
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    def blocks(a_rows: tuple[int, int]) -> tuple[tp.Module, ShardedVariable, ShardedVariable]:
        m = tp.Module()
        m.a = ShardedVariable(np.zeros((a_rows[1] - a_rows[0], cols), np.float32), full.shape, (a_rows[0], 0))
        m.b = ShardedVariable(np.zeros((4, cols), np.float32), full.shape, (4, 0))
        return m, m.a, m.b

    m, a, b = blocks((4, 8))
    where = [address(a), address(b)]
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    assert [address(a), address(b)] == where  # read into place
    np.testing.assert_array_equal(a.numpy(), full[4:])
    np.testing.assert_array_equal(b.numpy(), full[4:])

    m, a, b = blocks((2, 6))  # a straddles two stored slices; b's array is held by the caller
    held = b.numpy()
    where = [address(a), address(b)]
    tp.Checkpoint(model=m).read(prefix).assert_consumed()
    assert address(a) != where[0] and address(b) != where[1]
    np.testing.assert_array_equal(a.numpy(), full[2:6])
    np.testing.assert_array_equal(b.numpy(), full[4:])
    assert not held.any()  # what the caller holds never changes

    with BundleReader(prefix) as reader:
        part = reader.region_entry(key.format("b"), ((4, 8), (0, cols)))
    with open(reader.data_path(part.shard_id), "r+b") as f:  # damage b's second slice
        f.seek(part.offset + part.size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    m, a, b = blocks((4, 8))
    with pytest.raises(tp.errors.DataLossError, match="model/b"):
        tp.Checkpoint(model=m).read(prefix)
    assert not a.numpy().any() and not b.numpy().any()
