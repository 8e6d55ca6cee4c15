"""Helpers shared by test modules: paths, value comparison, model builders, log collectors.

Test modules import from here, never from ``conftest.py`` (which holds only fixtures and hooks) nor from
one another.
"""

from __future__ import annotations

import gc
import logging
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import numpy as np
from hypothesis import strategies as st

import trackpoint as tp
from trackpoint import sharding

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parent
GOLDEN = TESTS / "golden"
EXAMPLES = ROOT / "examples"

_T = TypeVar("_T")


def traced_peak(function: Callable[[], _T]) -> tuple[_T, int]:
    """``function()``'s result and the peak of Python memory (tracemalloc) while it ran, in bytes."""
    tracemalloc.start()
    try:
        result = function()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak


# -- values -------------------------------------------------------------------------------------


def assert_bit_equal(got: object, expected: object) -> None:
    """Same dtype, shape and bytes (NaNs and -0.0 included); strings compared as bytes."""
    if isinstance(expected, bytes):
        assert isinstance(got, bytes) and got == expected
        return
    expected_arr = np.asarray(expected)
    got_arr = np.asarray(got)
    assert got_arr.dtype == expected_arr.dtype, (got_arr.dtype, expected_arr.dtype)
    assert got_arr.shape == expected_arr.shape, (got_arr.shape, expected_arr.shape)
    if expected_arr.dtype == object:
        assert all(isinstance(x, bytes) for x in got_arr.reshape(-1))
        assert got_arr.tolist() == expected_arr.tolist()
    else:
        assert got_arr.tobytes() == expected_arr.tobytes()


class EveryTensorAlone(sharding.ShardingCallback):
    """A custom sharding callback: one data file per tensor."""

    @property
    def description(self) -> str:
        return "one shard per tensor"

    def __call__(self, shardable_tensors):
        return [{t.checkpoint_key: {t.slice_spec: t.tensor}} for t in shardable_tensors]


# -- models -------------------------------------------------------------------------------------


def model(value: float = 0.0, *, shared: bool = False) -> tp.Module:
    """The usual small model: a nested module, a list and a dict, every value ``value``.

    ``shared`` adds ``model.shared``, a second path to ``model.dense.kernel``.
    """
    m = tp.Module()
    m.dense = tp.Module()
    m.dense.kernel = tp.Variable(np.full((2, 2), value, np.float32))
    m.layers = [tp.Variable(np.float32(value)), {"bias": tp.Variable(np.full(3, value))}]
    if shared:
        m.shared = m.dense.kernel
    return m


def with_slots(value: float = 1.0) -> tp.Checkpoint:
    """A model of two variables and an Adam optimizer whose slots exist (the gradient moves nothing)."""
    m = tp.Module()
    m.a = tp.Variable(np.full(3, value, np.float32))
    m.b = tp.Variable(np.full(2, value + 1, np.float64))
    optimizer = tp.optimizers.Adam(0.1)
    optimizer.apply_gradients([(np.zeros(3, np.float32), m.a)])
    return tp.Checkpoint(model=m, optimizer=optimizer)


def overwrite_checkpoint(value: float, count: int = 6) -> tuple[tp.Checkpoint, tp.Module]:
    """A checkpoint of ``count`` 1 KiB float32 variables, every value ``value``."""
    m = tp.Module()
    m.vs = [tp.Variable(np.full(256, value, np.float32)) for _ in range(count)]
    return tp.Checkpoint(model=m), m


def shard_options(shards: int) -> tp.CheckpointOptions:
    """Options that split :func:`overwrite_checkpoint`'s six tensors into ``shards`` data files."""
    # six 1 KiB tensors: 1 KiB shards hold one each, 2 KiB two, 1 MiB all
    size = 6 * 1024 // shards if shards > 1 else 1 << 20
    return tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(size))


_KILL_AT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    from tests.helpers import overwrite_checkpoint, shard_options
    ckpt, model = overwrite_checkpoint(2.0)
    real = os.replace
    def replace(src, dst):
        if dst.endswith({suffix!r}):
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)
    os.replace = replace
    ckpt.write({prefix!r}, shard_options(6))
""")


def kill_inside_the_window(prefix: str, at: str = ".index") -> None:
    """Write ``prefix``, then SIGKILL a second write at its rename to a name ending in ``at``:
    by default the index's, inside TF's window (data renamed, index not)."""
    ckpt, _ = overwrite_checkpoint(1.0)
    ckpt.write(prefix, shard_options(6))
    code = _KILL_AT.format(root=str(ROOT), prefix=prefix, suffix=at)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()


class SaveTensorSlicesAsDeps(tp.Module):
    """Holds one 4-element array, checkpointed as two variables ``first_half``/``second_half``."""

    def __init__(
        self,
        names: tuple[str, ...] = ("first_half", "second_half"),
        track: bool = True,
        fill_names: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__()
        self.combined = tp.NoDependency(np.zeros(4, np.float32))
        self.restored: list[dict] = tp.NoDependency([])

        def fill(buffer: dict) -> None:
            for name, part in zip(fill_names or names, (self.combined[:2], self.combined[2:]), strict=False):
                buffer[name] = part

        def consume(values: dict) -> None:
            self.restored.append(values)
            self.combined = tp.NoDependency(np.concatenate([values["first_half"], values["second_half"]]))

        self.deps = tp.NoDependency(tp.split_dependency(list(names), [np.float32] * len(names), fill, consume))
        if track:
            self.track_all()

    def track_all(self) -> None:
        for name, dep in self.deps.items():
            self._track_trackable(dep, name)


class HasVariables(tp.Module):
    """Plain variables under the names :class:`SaveTensorSlicesAsDeps` saves."""

    def __init__(self) -> None:
        super().__init__()
        self.first_half = tp.Variable([0.0, 0.0])
        self.second_half = tp.Variable([0.0, 0.0])


# -- random object graphs ---------------------------------------------------------------------

names = st.text(alphabet="ab./_-k1", min_size=1, max_size=4)


def graph_specs(depth: int) -> st.SearchStrategy:
    """Specs of random object graphs of at most ``depth`` levels, for :func:`build_graph`."""
    leaf = st.tuples(st.just("var"), st.integers(0, 3))
    if depth == 0:
        return leaf
    sub = graph_specs(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(st.just("module"), st.dictionaries(names.filter(lambda n: n.isidentifier()), sub, max_size=3)),
        st.tuples(st.just("list"), st.lists(sub, max_size=3)),
        st.tuples(st.just("dict"), st.dictionaries(names, sub, max_size=3)),
    )


def build_graph(spec: tuple, counter: list[int], zero: bool) -> object:
    """The objects of ``spec``: variables numbered by ``counter`` (or zero)."""
    kind, content = spec
    if kind == "var":
        counter[0] += 1
        return tp.Variable(np.full((content,), 0.0 if zero else counter[0], np.float32))
    if kind == "module":
        m = tp.Module()
        for name, child in content.items():
            setattr(m, name, build_graph(child, counter, zero))
        return m
    if kind == "list":
        return [build_graph(child, counter, zero) for child in content]
    return {name: build_graph(child, counter, zero) for name, child in content.items()}


def wrap(value: object) -> tp.Trackable:
    """``value`` itself if it is trackable, else a module holding it."""
    if isinstance(value, tp.Trackable):
        return value
    holder = tp.Module()
    holder.value = value
    return holder


def variables_of(ckpt: tp.Checkpoint) -> list[tuple[str, tp.Variable]]:
    """Variables in breadth-first order of first discovery, with their paths."""
    found, seen, queue = [], {id(ckpt)}, [(ckpt, "")]
    while queue:
        obj, path = queue.pop(0)
        if isinstance(obj, tp.Variable):
            found.append((path, obj))
        for name, child in obj._trackable_children().items():
            if id(child) not in seen:
                seen.add(id(child))
                queue.append((child, f"{path}.{name}"))
    return found


# -- files and messages ---------------------------------------------------------------------------


def open_files(directory: pathlib.Path) -> list[str]:
    """The files under ``directory`` this process has open, from ``/proc/self/fd``.

    Descriptors that keep deleted checkpoint files alive are closed on a low-priority thread
    the deleting call does not wait for (``_storage/atomic.py``); on a loaded machine it may
    not have run yet, so those threads are given up to 10 s to finish first.
    """
    for thread in threading.enumerate():
        if thread.name == "trackpoint-release":
            thread.join(10)
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor of the listing itself, closed by now
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def parse_warning(message: str) -> tuple[list[str], dict[str, str]]:
    """The paths a partial-restore warning lists: never restored, and path -> attributes not taken."""
    unmatched: list[str] = []
    unused: dict[str, str] = {}
    section = None
    for line in message.splitlines()[1:]:
        if not line.startswith("  "):
            section = "unused" if "did not take" in line else "unmatched" if "never restored" in line else None
        elif section == "unmatched":
            unmatched.append(line.strip())
        elif section == "unused":
            path, _, attributes = line.strip().rpartition(": ")
            unused[path] = attributes
    return unmatched, unused


class ReuseLog(logging.Handler):
    """Collects the messages of the ``trackpoint.reuse`` logger (a real handler, at DEBUG): which saves and
    restores reused the previous layout or bindings, and the reason when one did not."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def clear(self) -> None:
        self.messages.clear()

    def _restores(self) -> list[str]:
        return [m for m in self.messages if "walking the object graph" in m or "repeating the bindings" in m]

    def repeated(self) -> bool:
        """Every restore since the last :meth:`clear` repeated its previous bindings (and there was one)."""
        restores = self._restores()
        return bool(restores) and all("repeating the bindings" in m for m in restores)

    def walked(self, reason: str = "") -> bool:
        """A restore since the last :meth:`clear` walked the graph, for a reason containing ``reason``."""
        return any("walking the object graph" in m and reason in m for m in self._restores())

    def not_kept(self, reason: str = "") -> bool:
        """A restore's bindings were not kept for the next, for a reason containing ``reason``."""
        return any("not kept for the next" in m and reason in m for m in self.messages)

    def saves(self) -> list[str]:
        """What each save said: reused its layout, or walked (and why)."""
        return [
            m
            for m in self.messages
            if "save" in m and ("walking the objects" in m or "reusing" in m or "layout is not kept" in m)
        ]


@contextmanager
def reuse_log() -> Iterator[ReuseLog]:
    """A :class:`ReuseLog` attached to the ``trackpoint.reuse`` logger while the block runs."""
    logger = logging.getLogger("trackpoint.reuse")
    handler = ReuseLog()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextmanager
def mounted_tmpfs(directory: pathlib.Path, size: str) -> Iterator[pathlib.Path]:
    """A real tmpfs of ``size`` (``"256k"``, ``"1m"``) mounted at ``directory`` (made here) for a
    full-disk test, unmounted after; skips the test where mounting is not allowed (not root)."""
    import pytest

    directory.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off: what runs inside, reference counting alone must free."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
