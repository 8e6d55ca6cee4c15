"""The save pipeline (``_saving/save.py``): its documented call order, and the committer seam."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import trackpoint as tp
from trackpoint._saving import committer as committer_module
from trackpoint._saving.save import SaveSettings, SaveState, save_checkpoint
from trackpoint._saving.write import write_bundle

SRC = pathlib.Path(tp.__file__).parent


def _imports(path: pathlib.Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_trackpoint_distributed_is_imported_by_the_first_save_it_could_claim(tmp_path) -> None:
    """``import trackpoint`` names ``trackpoint.distributed`` without importing it (``tests/test_layers.py``
    pins that the core imports no edge); a save with the default options in a process without
    torch.distributed imports nothing, and the first save given a coordinator imports it, so its
    resolver is asked (a coordinator of one rank: the process saves alone)."""
    code = (
        "import sys, trackpoint as tp\n"
        "class One:\n"
        "    rank, world_size, timeout = 0, 1, 1.0\n"
        "    def new_tag(self): return 't'\n"
        "    def gather(self, tag, value, root=0): return [value]\n"
        "    def all_gather(self, tag, value): return [value]\n"
        "    def broadcast(self, tag, value, root=0): return value\n"
        "    def fail(self, tag, message): pass\n"
        "    def barrier(self, tag): pass\n"
        "    def release(self, tag): pass\n"
        "    def alive(self, tag): raise AssertionError('a coordinator of one rank is never used')\n"
        "ckpt = tp.Checkpoint(w=tp.Variable(1.0))\n"
        f"ckpt.write({str(tmp_path / 'a')!r})\n"
        "print('trackpoint.distributed' in sys.modules)\n"
        f"ckpt.write({str(tmp_path / 'b')!r}, tp.CheckpointOptions(coordinator=One()))\n"
        "print('trackpoint.distributed' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]
    assert tp.load_variable(str(tmp_path / "b"), "w/.ATTRIBUTES/VARIABLE_VALUE") == 1.0


def test_two_first_saves_at_once_import_a_plug_in_once_and_both_proceed(tmp_path, monkeypatch) -> None:
    """Two threads whose first saves both could be claimed by a plug-in not imported yet: the
    plug-in is imported once, struck from the list once, and neither save raises."""
    (tmp_path / "slow_plug_in.py").write_text(
        "import time\n"
        "from trackpoint._saving import committer\n"
        "time.sleep(0.3)  # both threads are inside committer_for by now\n"
        "committer.register_resolver(lambda coordinator, task: None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(committer_module, "_plug_ins", ["slow_plug_in"])
    monkeypatch.setattr(committer_module, "_resolvers", [])
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(_first_claimable(committer_module))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [None, None]  # each asked the plug-in's resolver, which declined; nothing raised
    assert committer_module._plug_ins == [] and len(committer_module._resolvers) == 1
    monkeypatch.delitem(sys.modules, "slow_plug_in")


def _first_claimable(module: Any) -> object:
    try:
        return module.committer_for(object(), None)  # a coordinator given: a plug-in may claim it
    except ValueError as exc:  # the race this test is about: list.remove of a plug-in struck already
        return exc


def test_checkpoint_has_one_write_path() -> None:
    """The write skeleton exists once, in the pipeline: ``Checkpoint`` has no write path of its own."""
    for name in ("_write", "_write_together", "_async_writer"):
        assert not hasattr(tp.Checkpoint, name)
    imported = {name.rsplit(".", 1)[-1] for name in _imports(SRC / "checkpoint.py")}
    assert imported & {"serialize", "write_bundle", "AsyncWriter", "gc_paused", "run_write_callbacks"} == set()


def _state(events: list[str]) -> Callable[[], None]:
    return lambda: events.append("record")


def test_a_save_alone_runs_in_the_documented_order(tmp_path) -> None:
    events: list[str] = []
    prefix = str(tmp_path / "ckpt")
    settings = SaveSettings(callbacks=(lambda path: events.append(f"callback {path == prefix}"),))

    def before() -> None:
        events.append("before_write")

    save_checkpoint(prefix, tp.Variable(1.0), {}, settings, SaveState(), before_write=before, record=_state(events))
    assert events == ["before_write", "callback True", "record"]
    assert tp.load_variable(prefix, "_CHECKPOINTABLE_OBJECT_GRAPH") is not None


def test_the_record_runs_when_a_callback_fails_and_the_error_comes_after(tmp_path) -> None:
    events: list[str] = []

    def failing() -> None:
        raise RuntimeError("callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        save_checkpoint(
            str(tmp_path / "ckpt"), tp.Variable(1.0), {}, SaveSettings(callbacks=(failing,)), SaveState(),
            record=_state(events),
        )  # fmt: skip
    assert events == ["record"]


def test_before_write_refuses_before_anything_is_written(tmp_path) -> None:
    class Refusing(tp.Checkpoint):
        def _tp_before_write(self) -> None:
            raise tp.errors.InvalidArgumentError("refused")

    with pytest.raises(tp.errors.InvalidArgumentError, match="refused"):
        Refusing(w=tp.Variable(1.0)).write(str(tmp_path / "ckpt"))
    assert list(tmp_path.iterdir()) == []


class _Commit:
    """A commit that writes alone but records at its commit point, as several processes do."""

    records = True

    def __init__(self, prefix: str, events: list[str], committing: bool) -> None:
        self.prefix, self.events, self.committing = prefix, events, committing

    def write(
        self,
        tensors: Sequence[tuple[str, Any]],
        owners: Sequence[Any],
        sharding: Any,
        record: Callable[[], None] | None,
        follow: Callable[[], None] | None,
    ) -> None:
        self.events.append(f"write on {threading.current_thread().name}")
        write_bundle(self.prefix, tensors, sharding, owners)
        if self.committing:
            assert record is not None
            record()
        else:
            assert follow is not None
            follow()


class _Committer:
    def __init__(self, events: list[str], committing: bool) -> None:
        self.events, self.committing = events, committing

    def plan(
        self, prefix: str, tensors: Callable[[], Sequence[tuple[str, Any]]], settle: Callable[[], None]
    ) -> _Commit:
        settle()
        keys = [key for key, _ in tensors()]
        self.events.append(f"plan {keys[-1]} on {threading.current_thread().name}")
        return _Commit(prefix, self.events, self.committing)


@pytest.mark.parametrize("committing", [True, False])
@pytest.mark.parametrize("enable_async", [False, True])
def test_a_registered_committer_plans_on_the_caller_and_records_at_its_commit(
    tmp_path, monkeypatch, committing: bool, enable_async: bool
) -> None:
    events: list[str] = []
    claim = object()

    def resolver(option: Any, io_task: int | None) -> _Committer | None:
        return _Committer(events, committing) if option is claim and io_task == 1 else None

    monkeypatch.setattr(committer_module, "_resolvers", [resolver, *committer_module._resolvers])
    settings = SaveSettings(
        enable_async=enable_async,
        callbacks=(lambda: events.append("callback"),),
        coordinator=claim,
        io_device="/job:worker/task:1",
    )
    state = SaveState()
    prefix = str(tmp_path / "ckpt")
    save_checkpoint(
        prefix, tp.Variable(1.0), {}, settings, state, record=_state(events), follow=lambda: events.append("follow")
    )
    state.settle()
    caller = threading.current_thread().name
    writer = "trackpoint-async-save" if enable_async else caller
    assert events == [
        f"plan _CHECKPOINTABLE_OBJECT_GRAPH on {caller}",
        f"write on {writer}",
        "record" if committing else "follow",
        "callback",
    ]
    # Other options are not claimed: the process saves alone.
    events.clear()
    save_checkpoint(str(tmp_path / "alone"), tp.Variable(1.0), {}, SaveSettings(), SaveState(), record=_state(events))
    assert events == ["record"]
