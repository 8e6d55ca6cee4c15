"""CheckpointOptions: construction, async saves, write callbacks, skipping slots."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import trackpoint as tp
from trackpoint import sharding


class Gate(sharding.ShardingCallback):
    """A one-shard policy that holds the background writer until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    @property
    def description(self) -> str:
        return "waits for a test to release it"

    def __call__(self, shardable_tensors):
        self.entered.set()
        assert self.release.wait(10)
        return sharding.ShardByTaskPolicy()(shardable_tensors)


def _model() -> tp.Module:
    # Not helpers.model: a 4 KB tensor, so that an async save has something to write in the background.
    m = tp.Module()
    m.w = tp.Variable(np.arange(1000, dtype=np.float32))
    m.b = tp.Variable([1.0, 2.0])
    return m


# -- construction ------------------------------------------------------------------------


def test_defaults_and_repr() -> None:
    options = tp.CheckpointOptions()
    assert options.experimental_io_device is None and not options.enable_async
    assert options.experimental_write_callbacks is None and not options.experimental_skip_slot_variables
    assert repr(options) == "CheckpointOptions()"
    assert repr(tp.CheckpointOptions(enable_async=True)) == "CheckpointOptions(enable_async=True)"


def test_deprecated_async_alias_warns() -> None:
    with pytest.warns(DeprecationWarning, match="enable_async"):
        options = tp.CheckpointOptions(experimental_enable_async_checkpoint=True)
    assert options.enable_async and options.experimental_enable_async_checkpoint


@pytest.mark.parametrize("bad", [[1], [lambda a, b: None], ["print"], [lambda *, key: None]])
def test_callbacks_must_take_zero_or_one_argument(bad) -> None:
    with pytest.raises(tp.errors.InvalidCallbackError) as caught:
        tp.CheckpointOptions(experimental_write_callbacks=bad)
    # TF's CheckpointOptions raises AssertionError here; a TypeError is what the call would raise.
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, AssertionError)


def test_accepted_callback_shapes() -> None:
    tp.CheckpointOptions(
        experimental_write_callbacks=[lambda: None, lambda p: None, lambda p, q=1: None, lambda *args: None, print]
    )


def test_sharding_callback_type_is_checked() -> None:
    with pytest.raises(ValueError, match="ShardingCallback"):
        tp.CheckpointOptions(experimental_sharding_callback=lambda tensors: [tensors])


@pytest.mark.parametrize(
    "device", ["/job:localhost", "CPU:0", "/job:worker/replica:0/task:1/device:CPU:0", "/device:GPU:*", "gpu:1", ""]
)
def test_io_device_accepts_tf_device_strings(device: str) -> None:
    assert tp.CheckpointOptions(experimental_io_device=device).experimental_io_device == device


@pytest.mark.parametrize("device", ["foo:0", "/task:x", "CPU:0/GPU:0", "/replica:1.5", "/device:CPU:x", 7])
def test_io_device_rejects_malformed_strings(device) -> None:
    with pytest.raises(ValueError):
        tp.CheckpointOptions(experimental_io_device=device)


def test_copy_does_not_share_the_callback_list() -> None:
    callbacks = [lambda: None]
    options = tp.CheckpointOptions(experimental_write_callbacks=callbacks)
    clone = copy.copy(options)
    clone.experimental_write_callbacks.append(lambda: None)
    assert len(options.experimental_write_callbacks) == 1 and len(callbacks) == 1


def test_io_device_does_not_change_the_bytes(tmp_path) -> None:
    m = _model()
    tp.Checkpoint(m=m).write(str(tmp_path / "a"))
    tp.Checkpoint(m=m).write(str(tmp_path / "b"), options=tp.CheckpointOptions(experimental_io_device="/job:localhost"))
    for suffix in (".index", ".data-00000-of-00001"):
        assert (tmp_path / f"a{suffix}").read_bytes() == (tmp_path / f"b{suffix}").read_bytes()


def test_options_must_be_checkpoint_options(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="CheckpointOptions"):
        tp.Checkpoint(m=_model()).write(str(tmp_path / "a"), options={"enable_async": True})


# -- async ---------------------------------------------------------------------------------


def test_async_save_returns_before_writing_and_keeps_the_state_of_the_call(tmp_path) -> None:
    m = _model()
    gate = Gate()
    ckpt = tp.Checkpoint(m=m)
    options = tp.CheckpointOptions(enable_async=True, experimental_sharding_callback=gate)
    path = ckpt.save(str(tmp_path / "ckpt"), options=options)
    assert path == str(tmp_path / "ckpt-1") and ckpt.save_counter.numpy() == 1
    assert gate.entered.wait(10)  # the writer is busy with this save, the caller is free
    m.w.assign(np.zeros(1000, np.float32))
    m.b.assign_add([10.0, 10.0])
    assert not (tmp_path / "checkpoint").exists()  # nothing names an unfinished checkpoint
    gate.release.set()
    ckpt.sync()
    reader = tp.load_checkpoint(path)
    assert reader.get_tensor("m/w/.ATTRIBUTES/VARIABLE_VALUE").tolist() == list(range(1000))
    assert reader.get_tensor("m/b/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [1.0, 2.0]
    assert tp.latest_checkpoint(str(tmp_path)) == path


def test_a_replayed_async_save_keeps_the_state_of_the_call(tmp_path, monkeypatch) -> None:
    """A save that reuses the previous save's layout snapshots the values as they are when it is called,
    however late the writer thread gets to them."""
    from trackpoint._graph.serialize import SerializedCheckpoint

    m = _model()
    ckpt = tp.Checkpoint(m=m)
    ckpt.write(str(tmp_path / "first"))  # makes the layout the next save replays
    started, release = threading.Event(), threading.Event()
    with_graph = SerializedCheckpoint.with_graph

    def late(self: SerializedCheckpoint):
        started.set()
        assert release.wait(10)
        return with_graph(self)

    monkeypatch.setattr(SerializedCheckpoint, "with_graph", late)
    path = ckpt.write(str(tmp_path / "second"), options=tp.CheckpointOptions(enable_async=True))
    assert started.wait(10)
    m.w.assign(np.zeros(1000, np.float32))
    release.set()
    ckpt.sync()
    assert tp.load_checkpoint(path).get_tensor("m/w/.ATTRIBUTES/VARIABLE_VALUE").tolist() == list(range(1000))


def test_async_save_copies_foreign_arrays(tmp_path) -> None:
    class Buffer(tp.Trackable):
        def __init__(self) -> None:
            self.data = np.ones(4)

        def _serialize_to_tensors(self) -> dict:
            return {"data": self.data}

    buf = Buffer()
    gate = Gate()
    ckpt = tp.Checkpoint(buf=buf)
    ckpt.write(str(tmp_path / "c"), tp.CheckpointOptions(enable_async=True, experimental_sharding_callback=gate))
    assert gate.entered.wait(10)
    buf.data[:] = 7  # mutated in place while the save is pending
    gate.release.set()
    ckpt.sync()
    assert tp.load_variable(str(tmp_path / "c"), "buf/.ATTRIBUTES/data").tolist() == [1.0] * 4


def test_second_save_and_restore_wait_for_the_one_in_flight(tmp_path) -> None:
    m = _model()
    gate = Gate()
    ckpt = tp.Checkpoint(m=m)
    ckpt.save(str(tmp_path / "ckpt"), tp.CheckpointOptions(enable_async=True, experimental_sharding_callback=gate))
    assert gate.entered.wait(10)
    done = threading.Event()

    def second() -> None:
        ckpt.save(str(tmp_path / "ckpt"), tp.CheckpointOptions(enable_async=True))
        done.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not done.wait(0.3)  # blocked behind the first save
    gate.release.set()
    thread.join(10)
    assert done.is_set()
    status = tp.Checkpoint(m=_model()).restore(str(tmp_path / "ckpt-1"))
    ckpt.restore(str(tmp_path / "ckpt-2")).assert_consumed()  # waits for ckpt-2 to be complete
    status.assert_consumed()
    assert tp.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")


def test_background_failure_surfaces_on_sync_and_next_save(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    ckpt = tp.Checkpoint(m=_model())
    options = tp.CheckpointOptions(enable_async=True)
    ckpt.save(str(blocker / "ckpt"), options)  # returns: the failure happens in the background
    with pytest.raises(OSError):
        ckpt.sync()
    ckpt.sync()  # reported once
    ckpt.save(str(blocker / "ckpt"), options)
    with pytest.raises(OSError):
        ckpt.save(str(tmp_path / "ok"), options)  # the next save reports the previous failure
    ckpt.save(str(tmp_path / "ok"), options)
    ckpt.sync()
    assert tp.latest_checkpoint(str(tmp_path)) is not None


@pytest.mark.slow  # a child process per case: seconds
@pytest.mark.parametrize("sharding", ["", "experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(1 << 20)"])
def test_pending_async_write_finishes_at_interpreter_exit(tmp_path, sharding: str) -> None:
    """Helper threads (checksums, shards written in parallel) still run while the interpreter exits."""
    code = (
        "import numpy as np, trackpoint as tp\n"
        "v = tp.Variable(np.arange(2_000_000, dtype=np.float64))\n"
        "w = tp.Variable(np.ones(300_000, dtype=np.float64))\n"
        f"tp.Checkpoint(v=v, w=w).save({str(tmp_path / 'ckpt')!r}, tp.CheckpointOptions(enable_async=True, {sharding}))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert tp.load_variable(str(tmp_path), "v/.ATTRIBUTES/VARIABLE_VALUE")[-1] == 1_999_999
    assert tp.load_variable(str(tmp_path), "w/.ATTRIBUTES/VARIABLE_VALUE").sum() == 300_000


def test_manager_with_async_lists_a_checkpoint_only_once_complete(tmp_path) -> None:
    # TF's manager names the previous checkpoint until an async save completes; this one's
    # properties wait for the save in flight instead (issue 38), so they never name a
    # half-written checkpoint and never a stale one.
    gate = Gate()
    manager = tp.CheckpointManager(tp.Checkpoint(m=_model()), str(tmp_path), max_to_keep=2)
    path = manager.save(options=tp.CheckpointOptions(enable_async=True, experimental_sharding_callback=gate))
    assert gate.entered.wait(10)
    seen: list[tuple[str | None, list[str]]] = []
    reader = threading.Thread(target=lambda: seen.append((manager.latest_checkpoint, manager.checkpoints)))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive() and seen == []  # still waiting: the files are incomplete
    gate.release.set()
    reader.join(10)
    assert seen == [(path, [path])]
    manager.sync()
    assert manager.latest_checkpoint == path and manager.checkpoints == [path]


# -- callbacks -------------------------------------------------------------------------------


@pytest.mark.parametrize("enable_async", [False, True])
def test_write_callbacks_order_argument_thread_and_complete_files(tmp_path, enable_async: bool) -> None:
    calls: list[tuple[str, object, bool]] = []
    caller = threading.get_ident()

    def with_path(path: str) -> None:
        reader = tp.load_checkpoint(path)  # files are complete: every tensor reads and checksums
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
        calls.append(("with_path", path, threading.get_ident() == caller))

    def without() -> None:
        calls.append(("without", None, threading.get_ident() == caller))

    m = _model()
    ckpt = tp.Checkpoint(m=m)
    options = tp.CheckpointOptions(enable_async=enable_async, experimental_write_callbacks=[with_path, without])
    ckpt.write(str(tmp_path / "w"), options)
    path = ckpt.save(str(tmp_path / "s"), options)
    manager_path = tp.CheckpointManager(ckpt, str(tmp_path / "mgr"), max_to_keep=1).save(options=options)
    ckpt.sync()
    on_caller = not enable_async  # an async save calls them from its background writer, a sync one from the caller
    assert calls == [
        ("with_path", str(tmp_path / "w"), on_caller),
        ("without", None, on_caller),
        ("with_path", path, on_caller),
        ("without", None, on_caller),
        ("with_path", manager_path, on_caller),
        ("without", None, on_caller),
    ]
    assert options.experimental_write_callbacks == [with_path, without]  # save's own callbacks went to copies


# -- skip slot variables -----------------------------------------------------------------------


def test_skip_slot_variables_on_restore(tmp_path) -> None:
    w = tp.Variable([1.0, 2.0])
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.ones(2, np.float32), w)])
    path = tp.Checkpoint(w=w, opt=adam).write(str(tmp_path / "c"))

    fresh_w, fresh_opt = tp.Variable([0.0, 0.0]), tp.optimizers.Adam(0.1)
    fresh_opt.apply_gradients([(np.zeros(2, np.float32), fresh_w)])
    before = fresh_opt.get_slot(fresh_w, "m").numpy().copy()
    options = tp.CheckpointOptions(experimental_skip_slot_variables=True)
    status = tp.Checkpoint(w=fresh_w, opt=fresh_opt).read(path, options)
    status.assert_consumed()
    report = status.report()  # agrees with assert_consumed: the skipped slots are not "missing"
    assert report.complete and report.missing_from_checkpoint == () and not report.pending
    assert fresh_w.numpy().tolist() == w.numpy().tolist()
    assert fresh_opt.get_slot(fresh_w, "m").numpy().tolist() == before.tolist()  # not restored
    strict = tp.Checkpoint(w=tp.Variable([0.0, 0.0]), opt=tp.optimizers.Adam(0.1)).read(path)
    with pytest.raises(AssertionError):  # without the option the slots are required
        strict.assert_consumed()
    strict.expect_partial()


def test_no_warning_about_skipped_slots(tmp_path) -> None:
    w = tp.Variable([1.0])
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.ones(1, np.float32), w)])
    path = tp.Checkpoint(w=w, opt=adam).write(str(tmp_path / "c"))
    fresh = tp.optimizers.Adam(0.1)
    fresh_w = tp.Variable([0.0])
    fresh.apply_gradients([(np.zeros(1, np.float32), fresh_w)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.Checkpoint(w=fresh_w, opt=fresh).read(path, tp.CheckpointOptions(experimental_skip_slot_variables=True))
        import gc

        gc.collect()
    assert not [w for w in caught if "never restored" in str(w.message) and path in str(w.message)]
    assert os.path.exists(path + ".index")
