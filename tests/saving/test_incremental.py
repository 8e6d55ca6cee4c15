"""Incremental saves (``CheckpointOptions(incremental=True)``): unchanged data files are linked from the
checkpoint's previous save, what changed is written, every checkpoint stays whole and independent."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import EveryTensorAlone
from trackpoint.distributed import StoreCoordinator

INCREMENTAL = tp.CheckpointOptions(incremental=True)
ROWS = 1 << 20  # float32s: 4 MiB, a data file of its own


def _model(seed: int = 0) -> dict[str, tp.Variable]:
    rng = np.random.default_rng(seed)
    big = {f"layer{i}": tp.Variable(rng.standard_normal(ROWS, np.float32)) for i in range(4)}
    small = {f"bias{i}": tp.Variable(rng.standard_normal(8)) for i in range(3)}
    return {**big, "step": tp.Variable(np.int64(0)), **small}


def _data_files(prefix: str) -> dict[str, os.stat_result]:
    directory, base = os.path.split(prefix)
    return {n: os.stat(os.path.join(directory, n)) for n in os.listdir(directory) if n.startswith(base + ".data-")}


def _key_file(prefix: str, key: str) -> os.stat_result:
    """The stat of the data file that holds ``key``."""
    with tp.load_checkpoint(prefix) as reader:
        entry = reader._entries()[f"{key}/.ATTRIBUTES/VARIABLE_VALUE"]
        count = len(_data_files(prefix))
    return os.stat(f"{prefix}.data-{entry.shard_id:05d}-of-{count:05d}")


def _assert_holds(prefix: str, variables: dict[str, tp.Variable]) -> None:
    assert tp.verify_checkpoint(prefix) == []
    with tp.load_checkpoint(prefix) as reader:
        for name, v in variables.items():
            assert np.array_equal(reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE"), v.numpy()), (prefix, name)


def test_unchanged_tensors_are_linked_and_changed_ones_written(tmp_path: Path) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    first = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    variables["layer1"].assign(variables["layer1"].numpy() * 2)
    variables["step"].assign(np.int64(1))
    second = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    _assert_holds(second, variables)
    for frozen in ("layer0", "layer2", "layer3"):  # the same inode: linked, not written
        assert os.path.samestat(_key_file(first, frozen), _key_file(second, frozen)), frozen
    assert not os.path.samestat(_key_file(first, "layer1"), _key_file(second, "layer1"))
    assert not os.path.samestat(_key_file(first, "step"), _key_file(second, "step"))
    # The small tensors that did not change were written beside the step the first time; now
    # they share a file of their own, which the third save links.
    third = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    assert os.path.samestat(_key_file(second, "bias0"), _key_file(third, "bias0"))
    assert os.path.samestat(_key_file(second, "layer1"), _key_file(third, "layer1"))
    _assert_holds(third, variables)


def test_one_changed_element_of_a_large_tensor_is_written(tmp_path: Path) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    first = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    value = variables["layer2"].numpy().copy()
    value[ROWS // 2] = np.nextafter(value[ROWS // 2], np.float32(np.inf))  # the smallest change there is
    variables["layer2"].assign(value)
    second = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    assert not os.path.samestat(_key_file(first, "layer2"), _key_file(second, "layer2"))
    _assert_holds(second, variables)


def test_deleting_older_checkpoints_never_damages_newer_ones(tmp_path: Path) -> None:
    variables = _model()
    manager = tp.CheckpointManager(tp.Checkpoint(**variables), str(tmp_path), max_to_keep=1)
    for step in range(4):
        variables["step"].assign(np.int64(step))
        latest = manager.save(options=INCREMENTAL)
        assert manager.checkpoints == [latest]
        _assert_holds(latest, variables)
    assert "checkpoint" in os.listdir(tmp_path)
    assert all(name.startswith(("checkpoint", "ckpt-4.")) for name in os.listdir(tmp_path))


@pytest.mark.parametrize("change", ["rewritten", "deleted", "index deleted"])
def test_a_previous_file_changed_on_disk_is_not_linked(tmp_path: Path, change: str) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    first = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    victim = _key_file(first, "layer0")
    path = next(os.path.join(tmp_path, n) for n, s in _data_files(first).items() if os.path.samestat(s, victim))
    if change == "rewritten":  # same size, other bytes: only its identity tells
        data = Path(path).read_bytes()
        Path(path).write_bytes(bytes(len(data)))
    elif change == "deleted":
        os.remove(path)
    else:
        os.remove(first + ".index")
    second = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    _assert_holds(second, variables)
    if change != "deleted":
        assert not os.path.samestat(_key_file(second, "layer0"), os.stat(path))


def test_across_filesystems_the_files_are_copied(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's directory")
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    directory = shm / f"trackpoint-incremental-{os.getpid()}"
    try:
        first = ckpt.write(str(directory / "ckpt"), INCREMENTAL)
        second = ckpt.write(str(tmp_path / "ckpt"), INCREMENTAL)  # links fail with EXDEV here
        assert _key_file(second, "layer0").st_nlink == 1
        _assert_holds(second, variables)
        _assert_holds(first, variables)
    finally:
        for name in os.listdir(directory):
            os.remove(directory / name)
        directory.rmdir()


def test_async_incremental_saves(tmp_path: Path) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    options = tp.CheckpointOptions(incremental=True, enable_async=True)
    first = ckpt.save(str(tmp_path / "ckpt"), options=options)
    variables["layer3"].assign(np.zeros(ROWS, np.float32))
    second = ckpt.save(str(tmp_path / "ckpt"), options=options)
    ckpt.sync()
    assert os.path.samestat(_key_file(first, "layer0"), _key_file(second, "layer0"))
    _assert_holds(second, variables)


def test_what_an_incremental_save_cannot_do_is_refused(tmp_path: Path) -> None:
    ckpt = tp.Checkpoint(v=tp.Variable(np.ones(3)))
    callback = tp.CheckpointOptions(incremental=True, experimental_sharding_callback=EveryTensorAlone())
    with pytest.raises(tp.errors.InvalidArgumentError, match="experimental_sharding_callback"):
        ckpt.write(str(tmp_path / "a"), callback)

    class Store:  # never reached: the save is refused before any message
        def set(self, key, value):
            raise AssertionError(key)

        def wait_get(self, key, timeout):
            raise AssertionError(key)

        def delete(self, key):
            raise AssertionError(key)

    several = tp.CheckpointOptions(incremental=True, coordinator=StoreCoordinator(Store(), 0, 2, 1.0, "t"))
    with pytest.raises(tp.errors.InvalidArgumentError, match="several processes"):
        ckpt.write(str(tmp_path / "b"), several)
    assert not list(tmp_path.iterdir())


@pytest.mark.interop
def test_tensorflow_reads_an_incremental_checkpoint(tmp_path: Path) -> None:
    from tests.interop.tf_process import tf_side

    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    variables["layer1"].assign(np.ones(ROWS, np.float32))
    ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)
    third = ckpt.save(str(tmp_path / "ckpt"), options=INCREMENTAL)  # linked files from both before
    theirs = tf_side("files").load(third)["tensors"]
    for name, v in variables.items():
        assert np.array_equal(theirs[f"{name}/.ATTRIBUTES/VARIABLE_VALUE"], v.numpy()), name


def test_writing_one_prefix_again_links_files_onto_their_own_names(tmp_path: Path) -> None:
    variables = _model()
    ckpt = tp.Checkpoint(**variables)
    prefix = str(tmp_path / "weights")
    for step in range(4):
        variables["step"].assign(np.int64(step))
        if step == 2:
            variables["layer1"].assign(variables["layer1"].numpy() + 1)
        assert ckpt.write(prefix, INCREMENTAL) == prefix
        _assert_holds(prefix, variables)
        names = os.listdir(tmp_path)
        assert not [n for n in names if ".tp-" in n], names  # no temporary left
        assert len({n.rsplit("-of-", 1)[1] for n in names if ".data-" in n}) == 1, names  # one bundle's files
