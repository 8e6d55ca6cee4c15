"""Async saves written by the writer process (``CheckpointOptions(async_writer="process")``).

The child writes exactly the files the thread writes; its errors, its death and its parent's
death are handled as issue 44 asks: ``sync()`` raises, nothing half-written is published, the
next save works, and the child never outlives the process it writes for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import trackpoint as tp
from trackpoint._saving import writer_process

pytestmark = pytest.mark.skipif(not writer_process.AVAILABLE, reason="the writer process needs memfd_create (Linux)")

PROCESS = tp.CheckpointOptions(enable_async=True, async_writer="process")
THREAD = tp.CheckpointOptions(enable_async=True)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model() -> tp.Module:
    """Every kind of value the child is sent: many small arrays of several dtypes, large ones,
    scalars, an empty array, bfloat16 and a string."""
    rng = np.random.default_rng(7)
    module = tp.Module()
    module.small = [tp.Variable(rng.standard_normal(i % 7 + 1).astype(np.float32)) for i in range(300)]
    module.ints = [tp.Variable(np.arange(i, dtype=np.int64)) for i in range(1, 40)]
    module.large = tp.Variable(rng.standard_normal((300, 200)))  # 480 KB: copied alone
    module.half = tp.Variable(rng.standard_normal((5, 3)).astype(ml_dtypes.bfloat16))
    module.empty = tp.Variable(np.zeros((0, 3), np.int8))
    module.scalar = tp.Variable(np.float64(2.5))
    module.text = tp.Variable(b"a string \x00 with a NUL")
    return module


def _files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def _child_pid() -> int:
    child = writer_process._child
    assert child is not None and child.alive()
    return child.process.pid


def test_the_writer_process_writes_the_bytes_the_thread_writes(tmp_path) -> None:
    module = _model()
    by_process, by_thread = tmp_path / "process", tmp_path / "thread"
    for directory, options in ((by_process, PROCESS), (by_thread, THREAD)):
        ckpt = tp.Checkpoint(model=module)
        ckpt.write(str(directory / "ckpt"), options)
        ckpt.sync()
    assert _child_pid() != os.getpid()
    assert _files(str(by_process)) == _files(str(by_thread))
    fresh = _model()
    for variable in fresh.small + fresh.ints:
        variable.assign(np.zeros_like(variable.numpy()))
    tp.Checkpoint(model=fresh).read(str(by_process / "ckpt")).assert_consumed()
    for a, b in zip(module.small + module.ints, fresh.small + fresh.ints):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_saves_of_other_keys_and_values_after_one_another(tmp_path) -> None:
    """The child keeps the last keys it was sent; a save of other keys must send its own."""
    first = tp.Checkpoint(a=tp.Variable(np.ones(3)), b=tp.Variable(np.arange(4)))
    second = tp.Checkpoint(b=tp.Variable(np.full(4, 9)), c=tp.Variable(np.float32(1.5)))
    for step in range(3):
        first.write(str(tmp_path / f"first-{step}"), PROCESS)
        second.write(str(tmp_path / f"second-{step}"), PROCESS)
        first.a.assign(np.full(3, float(step)))
        # The shared memory grows (and is mapped again) for a larger state.
        second.c = tp.Variable(np.arange(1 << (18 + 2 * step), dtype=np.float32))
    first.sync()
    second.sync()
    with tp.load_checkpoint(str(tmp_path / "first-2")) as reader:
        np.testing.assert_array_equal(reader.get_tensor("a/.ATTRIBUTES/VARIABLE_VALUE"), np.full(3, 1.0))
    with tp.load_checkpoint(str(tmp_path / "second-2")) as reader:
        np.testing.assert_array_equal(reader.get_tensor("c/.ATTRIBUTES/VARIABLE_VALUE"), np.arange(1 << 20))
        assert "a/.ATTRIBUTES/VARIABLE_VALUE" not in reader.get_variable_to_shape_map()


def test_a_layout_is_reused_only_for_the_same_dtypes_and_shapes(tmp_path) -> None:
    """Saves of one checkpoint reuse the last staging layout while every dtype and shape stays;
    a reshape, a dtype of the same size, bytes for an array, or other strings must still be
    written as they are. (A tp.Variable keeps native byte order; the next test takes the other.)"""
    module = _model()
    module.flip = tp.Variable(np.arange(6.0))
    changes = [  # (change, whether the last layout may serve)
        (lambda: module.small[0].assign(np.full(1, 7.0, np.float32)), True),
        (lambda: setattr(module, "large", tp.Variable(module.large.numpy().reshape(200, 300))), False),
        (lambda: setattr(module, "large", tp.Variable(module.large.numpy().view(np.int64))), False),
        (lambda: setattr(module, "text", tp.Variable(b"other text")), True),
        (lambda: setattr(module, "flip", tp.Variable(b"bytes now")), False),
        (lambda: setattr(module, "flip", tp.Variable(np.arange(6.0))), False),
        (lambda: setattr(module, "empty", tp.Variable(np.zeros((3, 0), np.int8))), False),
    ]
    by_process, by_thread = tp.Checkpoint(model=module), tp.Checkpoint(model=module)
    by_process.write(str(tmp_path / "first" / "ckpt"), PROCESS)
    by_process.sync()
    for step, (change, reused) in enumerate(changes):
        change()
        last = writer_process._child.layout if writer_process._child is not None else None
        by_process.write(str(tmp_path / f"process-{step}" / "ckpt"), PROCESS)
        by_process.sync()
        assert (writer_process._child.layout is last) == reused, step
        by_thread.write(str(tmp_path / f"thread-{step}" / "ckpt"), THREAD)
        by_thread.sync()
        assert _files(str(tmp_path / f"process-{step}")) == _files(str(tmp_path / f"thread-{step}")), step
    with tp.load_checkpoint(str(tmp_path / "process-6" / "ckpt")) as reader:
        assert reader.get_variable_to_dtype_map()["model/large/.ATTRIBUTES/VARIABLE_VALUE"] == np.int64
        assert reader.get_tensor("model/large/.ATTRIBUTES/VARIABLE_VALUE").shape == (200, 300)
        assert reader.get_tensor("model/text/.ATTRIBUTES/VARIABLE_VALUE") == b"other text"


def test_a_layout_is_not_reused_across_byte_orders_or_from_bytes_to_float64() -> None:
    native = np.arange(4.0)
    last = writer_process._Layout.of([native], [native.dtype], None)
    swapped = native.astype(">f8")
    assert writer_process._Layout.of([swapped], [swapped.dtype], last) is not last
    assert writer_process._Layout.of([native.copy()], [native.dtype], last) is last
    # np.dtype(None) is float64, so the dtypes alone compare equal: the shapes tell them apart.
    of_bytes = writer_process._Layout.of([b"text"], [None], None)
    assert [None] == [native.dtype]
    assert writer_process._Layout.of([native], [native.dtype], of_bytes) is not of_bytes


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
@pytest.mark.parametrize("options", [PROCESS, THREAD], ids=["process", "thread"])
def test_the_writers_run_off_the_cpu_the_save_was_called_on(tmp_path, options) -> None:
    """A loop pinned to one CPU saves: the writer thread (and the child, for the process writer)
    run on the others, whichever CPUs the loop's thread passed on to the threads it started."""
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    seen: dict[str, set[int]] = {}
    callback = tp.CheckpointOptions(
        experimental_write_callbacks=[lambda _: seen.update(writer=os.sched_getaffinity(0))]
    )
    options = tp.CheckpointOptions(
        enable_async=True,
        async_writer=options.async_writer,
        experimental_write_callbacks=callback.experimental_write_callbacks,
    )

    def pinned_loop() -> None:
        os.sched_setaffinity(0, {cpu})
        ckpt = tp.Checkpoint(v=tp.Variable(np.arange(10.0)))
        ckpt.write(str(tmp_path / "ckpt"), options)
        ckpt.sync()

    thread = threading.Thread(target=pinned_loop)
    thread.start()
    thread.join()
    assert seen["writer"] == allowed - {cpu}  # the callbacks run on the checkpoint's writer thread
    if options.async_writer == "process":
        assert os.sched_getaffinity(_child_pid()) == allowed - {cpu}


def test_the_manager_callbacks_and_sync_work_as_with_the_thread(tmp_path) -> None:
    seen: list[str] = []
    options = tp.CheckpointOptions(
        enable_async=True, async_writer="process", experimental_write_callbacks=[seen.append]
    )
    step = tp.Variable(np.int64(0))
    ckpt = tp.Checkpoint(step=step)
    manager = tp.CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    for i in range(4):
        step.assign(np.int64(i))
        manager.save(options=options)
    ckpt.sync()
    assert seen == [os.path.join(str(tmp_path), f"ckpt-{i}") for i in range(1, 5)]
    assert manager.checkpoints == seen[-2:]
    assert tp.latest_checkpoint(str(tmp_path)) == seen[-1]
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".index")) == ["ckpt-3.index", "ckpt-4.index"]
    restored = tp.Variable(np.int64(-1))
    tp.Checkpoint(step=restored).read(seen[-1]).assert_existing_objects_matched().expect_partial()
    assert int(restored.numpy()) == 3


def test_an_error_in_the_child_is_raised_by_sync_as_the_thread_raises_it(tmp_path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    ckpt = tp.Checkpoint(v=tp.Variable(np.ones(4)))
    raised = []
    for options in (PROCESS, THREAD):
        ckpt.write(str(blocker / "ckpt"), options)
        with pytest.raises(tp.errors.WriteError) as info:
            ckpt.sync()
        raised.append((str(info.value), info.value.path))
    assert raised[0] == raised[1]
    assert "not-a-directory" in raised[0][0] and "Nothing of it was published" in raised[0][0]
    ckpt.write(str(tmp_path / "ok"), PROCESS)  # the child goes on
    ckpt.sync()
    assert os.path.exists(str(tmp_path / "ok.index"))


def test_a_child_that_dies_mid_save_fails_that_save_and_the_next_starts_another(tmp_path) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(np.arange(1000.0)))
    ckpt.write(str(tmp_path / "before"), PROCESS)
    ckpt.sync()
    pid = _child_pid()
    os.kill(pid, signal.SIGSTOP)  # the save is staged and sent, and never answered
    try:
        ckpt.write(str(tmp_path / "lost"), PROCESS)
        time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(tp.errors.WriteError, match="the process writing it ended"):
        ckpt.sync()
    assert not os.path.exists(str(tmp_path / "lost.index"))
    tp.Checkpoint(v=tp.Variable(np.zeros(1000))).read(str(tmp_path / "before")).assert_consumed()
    ckpt.write(str(tmp_path / "after"), PROCESS)
    ckpt.sync()
    assert _child_pid() != pid
    restored = tp.Variable(np.zeros(1000))
    tp.Checkpoint(v=restored).read(str(tmp_path / "after")).assert_consumed()
    np.testing.assert_array_equal(restored.numpy(), np.arange(1000.0))


def test_the_child_dies_with_its_parent(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        import numpy as np
        import trackpoint as tp
        from trackpoint._saving import writer_process
        ckpt = tp.Checkpoint(v=tp.Variable(np.ones(8)))
        ckpt.write(sys.argv[1], tp.CheckpointOptions(enable_async=True, async_writer="process"))
        ckpt.sync()
        print(writer_process._child.process.pid, flush=True)
        time.sleep(600)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "ckpt")], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.kill(child, 0)  # alive
    finally:
        parent.kill()
        parent.wait(timeout=60)
    deadline = time.monotonic() + 10  # PR_SET_PDEATHSIG acts at once; 10 s bounds a loaded machine
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the writer process {child} outlived its parent")


def test_async_writer_takes_only_its_values() -> None:
    assert tp.CheckpointOptions(async_writer="thread").async_writer == "thread"
    with pytest.raises(tp.errors.InvalidArgumentError, match="async_writer"):
        tp.CheckpointOptions(async_writer="fork")
    options = tp.CheckpointOptions()
    with pytest.raises(tp.errors.InvalidArgumentError, match="got True"):
        options.async_writer = True


def test_a_save_still_pending_at_exit_is_finished_by_the_child(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        import trackpoint as tp
        ckpt = tp.Checkpoint(v=tp.Variable(np.arange(4_000_000.0)))
        ckpt.write(sys.argv[1], tp.CheckpointOptions(enable_async=True, async_writer="process"))
        """  # no sync(): the interpreter's exit waits for the write, which the child does
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "ckpt")], check=True, env=env, timeout=120)
    restored = tp.Variable(np.zeros(4_000_000))
    tp.Checkpoint(v=restored).read(str(tmp_path / "ckpt")).assert_consumed()
    assert restored.numpy()[-1] == 3_999_999.0


def test_values_of_every_layout_are_written_as_the_thread_writes_them(tmp_path) -> None:
    """Strided and transposed arrays (staged in logical order), big-endian ones, strings with NULs
    and non-ASCII text, and empty arrays (sent in the message): the files are the thread's."""
    from trackpoint._saving.write import write_bundle

    tensors = [
        ("small", np.arange(600.0).reshape(20, 30)[:, ::3]),  # packed with the small ones
        ("large", np.arange(40_000.0).reshape(200, 200).T),  # copied alone
        ("big_endian", np.arange(12, dtype=">i4").reshape(3, 4)),
        ("strings", np.array([[b"a\x00b", "caf\u00e9"], [b"", "x"]], object)),
        ("empty", np.zeros((0, 2), ">f4")),
        ("half", np.arange(5_000_000).astype(ml_dtypes.bfloat16)),  # no buffer format, written while checksummed
        ("graph", b"\x00bytes"),
    ]
    writer_process.write_in_child(str(tmp_path / "process" / "c"), tensors)
    write_bundle(str(tmp_path / "thread" / "c"), tensors)
    assert _files(str(tmp_path / "process")) == _files(str(tmp_path / "thread"))
    with tp.load_checkpoint(str(tmp_path / "process" / "c")) as reader:
        np.testing.assert_array_equal(reader.get_tensor("large"), tensors[1][1])
        assert reader.get_tensor("strings").tolist() == [[b"a\x00b", "café".encode()], [b"", b"x"]]


def test_other_object_arrays_are_written_by_the_thread(tmp_path) -> None:
    assert not writer_process.write_in_child(str(tmp_path / "odd"), [("odd", np.array([1, None], object))])
    assert not os.path.exists(str(tmp_path / "odd.index"))  # nothing done: the caller writes it
    assert writer_process.write_in_child(str(tmp_path / "text"), [("text", np.array([b"a", "b"], object))])


def test_a_save_to_a_url_is_written_by_the_thread_that_holds_the_store() -> None:
    """``memory://`` lives in this process: a child writing there would lose the checkpoint."""
    pytest.importorskip("fsspec")
    ckpt = tp.Checkpoint(v=tp.Variable(np.arange(5.0)))
    prefix = f"memory://writer-process-{os.getpid()}/ckpt"
    ckpt.write(prefix, PROCESS)
    ckpt.sync()
    restored = tp.Variable(np.zeros(5))
    tp.Checkpoint(v=restored).read(prefix).assert_consumed()
    np.testing.assert_array_equal(restored.numpy(), np.arange(5.0))
