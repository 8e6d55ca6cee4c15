"""``CheckpointView``: it closes the files it opens, and ``diff`` has one precise type per call."""

from __future__ import annotations

import os
import typing

import numpy as np
import pytest

import trackpoint as tp


def _open_files_under(directory) -> list[str]:
    """The files of ``directory`` this process holds open (Linux's /proc/self/fd)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used, closed by now
        if target.startswith(str(directory)):
            found.append(target)
    return found


def _saved(directory, name: str, value: float) -> str:
    root = tp.Module()
    root.w = tp.Variable(np.full(4, value, np.float32))
    return tp.Checkpoint(root).write(str(directory / name))


def test_close_releases_the_data_files_and_keeps_the_graph(tmp_path) -> None:
    path = _saved(tmp_path, "ckpt", 1.0)
    view = tp.CheckpointView(path)
    assert view.diff(view).equal  # reads every value: the data file is now open
    assert _open_files_under(tmp_path) == [str(tmp_path / "ckpt.data-00000-of-00001")]
    view.close()
    assert _open_files_under(tmp_path) == []
    assert view.children(0) == {"w": 1, "root": 0}  # what the graph says is still there
    assert "w  float32[4]  16 B" in view.tree()
    with pytest.raises(tp.errors.InvalidArgumentError, match="closed"):
        view.diff(view)  # values are not
    view.close()  # again: nothing happens


def test_a_with_block_closes_the_view(tmp_path) -> None:
    path = _saved(tmp_path, "ckpt", 1.0)
    with tp.CheckpointView(path) as view:
        assert isinstance(view, tp.CheckpointView)
        assert view.diff(path).equal
    assert _open_files_under(tmp_path) == []
    with pytest.raises(tp.errors.InvalidArgumentError, match="closed"):
        view.diff(view)


def test_diff_with_a_path_closes_the_checkpoint_it_opened(tmp_path) -> None:
    first, second = _saved(tmp_path, "a", 1.0), _saved(tmp_path, "b", 2.0)
    with tp.CheckpointView(first) as view:
        result = view.diff(second)
        assert [change.path for change in result.changed] == ["(root).w"]
        assert _open_files_under(tmp_path) == [str(tmp_path / "a.data-00000-of-00001")]  # its own only


def test_diff_with_another_view_leaves_that_view_open(tmp_path) -> None:
    first, second = _saved(tmp_path, "a", 1.0), _saved(tmp_path, "b", 1.0)
    with tp.CheckpointView(first) as view, tp.CheckpointView(second) as other:
        assert view.diff(other).equal
        assert view.diff(other).equal  # the caller's view still reads


def test_diff_is_typed_per_call() -> None:
    """A type checker sees TF's triple for a trackable and a CheckpointDiff for a checkpoint."""
    overloads = typing.get_overloads(tp.CheckpointView.diff)
    hints = [typing.get_type_hints(o) for o in overloads]
    by_argument = {h["obj"]: h["return"] for h in hints}
    assert by_argument[tp.Trackable] == tuple[dict[int, tp.Trackable], list[int], list[tp.Trackable]]
    assert by_argument[tp.CheckpointView | str | os.PathLike[str]] is tp.CheckpointDiff
    implementation = typing.get_type_hints(tp.CheckpointView.diff)["return"]
    assert implementation != typing.Any and set(typing.get_args(implementation)) == set(by_argument.values())


def test_a_view_that_cannot_be_made_leaves_no_file_open(tmp_path) -> None:
    path = _saved(tmp_path, "ckpt", 1.0)
    data = tmp_path / "ckpt.data-00000-of-00001"
    data.write_bytes(bytes(len(data.read_bytes())))  # the object graph's checksum fails too
    with pytest.raises(tp.errors.DataLossError) as caught:
        tp.CheckpointView(path)
    assert caught.value.__traceback__ is not None  # it holds the half-made view's frame ...
    assert _open_files_under(tmp_path) == []  # ... but not its open data file


@pytest.mark.slow  # a 100,000-deep chain, measured: seconds
def test_a_deep_chain_costs_linear_memory_in_descendants_and_paths() -> None:
    """A hostile 50,000-deep chain: the breadth-first walks keep paths short instead of building ~2.5 GB of
    ever longer path strings (which took 10 s and gigabytes of fresh pages)."""
    import pathlib
    import tracemalloc

    prefix = pathlib.Path(__file__).resolve().parents[1] / "corrupt" / "corpus" / "graph_deep_chain" / "ckpt"
    with tp.CheckpointView(str(prefix)) as view:
        tracemalloc.start()
        try:
            order = view.descendants()
            paths = view._descendants_with_paths()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert len(order) == len(paths) == 50_001
    assert order[:3] == [0, 1, 2] and paths[1].startswith("root.")
    assert max(map(len, paths.values())) < 2_000
    assert peak < 200 << 20
