"""One TF checkpoint saved by 2 and 4 real processes on torch.distributed (gloo), restored at other sizes."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import trackpoint as tp
from tests.distributed.ranks import FULL, REPLICATED, assign_step, full_value, init_gloo, model, rows, run_ranks
from trackpoint._format.bundle_reader import BundleReader
from trackpoint.distributed import ShardedVariable

pytestmark = pytest.mark.slow
W_KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def _save_with_manager(rank: int, world: int, work: str, saves: int, options: dict | None = None) -> list:
    init_gloo(rank, world, os.path.join(work, "init"))
    m = model(rank, world, 0.0)
    manager = tp.CheckpointManager(tp.Checkpoint(model=m), os.path.join(work, "run"), max_to_keep=2)
    paths = []
    for step in range(1, saves + 1):
        assign_step(m, rank, world, step)
        opts = tp.CheckpointOptions(**(options or {}))
        paths.append(manager.save(options=opts))
        if opts.enable_async:
            manager.sync()
    return [paths, manager.checkpoints, manager.latest_checkpoint]


@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_saves_its_part_once_into_one_checkpoint(tmp_path, world):
    results = run_ranks(_save_with_manager, world, str(tmp_path), str(tmp_path), 3)
    assert all("value" in r for r in results), results
    assert all(r["value"] == results[0]["value"] for r in results), "every rank returns the same paths"
    paths, kept, latest = results[0]["value"]
    assert kept == paths[-2:] and latest == paths[-1] == tp.latest_checkpoint(str(tmp_path / "run"))
    names = sorted(os.listdir(tmp_path / "run"))
    assert [n for n in names if n.startswith("ckpt-3.data")] == [
        f"ckpt-3.data-{i:05d}-of-{world:05d}" for i in range(world)
    ]
    assert not any(n.startswith("ckpt-1.") for n in names), "max_to_keep applied once, by the committing rank"
    assert not any(".tp-tmp-" in n for n in names)
    with BundleReader(latest) as reader:
        # Every replicated tensor is stored once; the sharded one as one slice per rank.
        files = {reader.entry(f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE").shard_id for i in range(REPLICATED)}
        assert len(files) >= world - 1, "the replicated tensors are spread over the ranks' files"
        entry = reader.entry(W_KEY)
        assert len(entry.slices) == world
        from trackpoint._format import slices

        stored = sum(reader.entry(f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE").size for i in range(REPLICATED))
        stored += sum(
            reader.entry(slices.encode_slice_key(W_KEY, slices.extents_from_proto(p))).size for p in entry.slices
        )
        stored += (
            reader.entry("_CHECKPOINTABLE_OBJECT_GRAPH").size
            + reader.entry("save_counter/.ATTRIBUTES/VARIABLE_VALUE").size
        )
    written = sum(os.path.getsize(tmp_path / "run" / n) for n in names if n.startswith("ckpt-3.data"))
    assert written == stored, "no byte is written twice: the data files hold exactly the stored entries"
    np.testing.assert_array_equal(tp.load_variable(latest, W_KEY), full_value(3))
    for i in range(REPLICATED):
        assert tp.load_variable(latest, f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE")[0] == 3 + i
    # One process restores the whole checkpoint into unsharded variables.
    whole = tp.Module()
    whole.w = tp.Variable(np.zeros(FULL, np.float32))
    whole.rest = [tp.Variable(np.zeros((i + 1) * 7)) for i in range(REPLICATED)]
    tp.Checkpoint(model=whole).restore(latest).assert_consumed()
    np.testing.assert_array_equal(whole.w.numpy(), full_value(3))


def test_async_saves_of_two_ranks_commit_on_the_writer_threads(tmp_path):
    results = run_ranks(_save_with_manager, 2, str(tmp_path), str(tmp_path), 3, {"enable_async": True})
    assert all("value" in r for r in results), results
    latest = results[0]["value"][2]
    np.testing.assert_array_equal(tp.load_variable(latest, W_KEY), full_value(3))


def _restore_block(rank: int, world: int, path: str) -> list:
    m = model(rank, world, -1.0)
    tp.Checkpoint(model=m).restore(path).assert_consumed()
    start, stop = rows(rank, world)
    return [start, stop, m.w.numpy().tolist(), [float(v.numpy()[0]) for v in m.rest]]


@pytest.mark.parametrize(("saved", "restored"), [(2, 4), (4, 1), (3, 2)])
def test_a_checkpoint_of_n_ranks_restores_at_any_world_size(tmp_path, saved, restored):
    results = run_ranks(_save_with_manager, saved, str(tmp_path), str(tmp_path), 1)
    assert all("value" in r for r in results), results
    path = results[0]["value"][2]
    blocks = run_ranks(_restore_block, restored, str(tmp_path), path)
    for r, result in enumerate(blocks):
        assert "value" in result, result
        start, stop, block, rest = result["value"]
        assert (start, stop) == rows(r, restored)
        np.testing.assert_array_equal(np.array(block, np.float32), full_value(1)[start:stop])
        assert rest == [1.0 + i for i in range(REPLICATED)]


def test_a_rank_reads_only_the_slices_its_block_overlaps(tmp_path):
    results = run_ranks(_save_with_manager, 2, str(tmp_path), str(tmp_path), 1)
    path = results[0]["value"][2]
    with BundleReader(path) as reader:
        entry = reader.entry(W_KEY)
        second = next(p for p in entry.slices if p.extent[0].start == rows(1, 2)[0])
        from trackpoint._format import slices

        part = reader.entry(slices.encode_slice_key(W_KEY, slices.extents_from_proto(second)))
        data_file, offset = reader.data_path(part.shard_id), part.offset
    with open(data_file, "r+b") as f:  # damage rank 1's slice
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    top = ShardedVariable(np.zeros((rows(0, 2)[1], FULL[1]), np.float32), FULL, (0, 0))
    m = tp.Module()
    m.w = top
    tp.Checkpoint(model=m).restore(path).expect_partial()
    np.testing.assert_array_equal(top.numpy(), full_value(1)[: rows(0, 2)[1]])
    with pytest.raises(tp.errors.DataLossError):
        tp.load_variable(path, W_KEY)


def _mismatched(rank: int, world: int, work: str) -> str:
    init_gloo(rank, world, os.path.join(work, "init"))
    m = model(rank, world, 1.0)
    if rank == 1:
        m.extra = tp.Variable(np.zeros(3))
    return tp.Checkpoint(model=m).write(os.path.join(work, "out", "ckpt"))


def test_ranks_with_different_objects_are_refused_before_anything_is_written(tmp_path):
    results = run_ranks(_mismatched, 2, str(tmp_path), str(tmp_path))
    assert [r.get("error") for r in results] == ["InvalidArgumentError"] * 2, results
    assert results[0]["message"] == results[1]["message"]
    assert "rank 0: model/rest/0" in results[0]["message"] and "rank 1: model/extra" in results[0]["message"]
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def _bad_tiling(rank: int, world: int, work: str) -> str:
    init_gloo(rank, world, os.path.join(work, "init"))
    m = tp.Module()
    m.w = ShardedVariable(np.zeros((4, 2)), (6, 2), (0, 0))  # both ranks hold rows 0-4: overlap, rows 4-6 missing
    return tp.Checkpoint(model=m).write(os.path.join(work, "out", "ckpt"))


def test_slices_that_overlap_or_leave_gaps_are_refused_on_every_rank(tmp_path):
    results = run_ranks(_bad_tiling, 2, str(tmp_path), str(tmp_path))
    assert [r.get("error") for r in results] == ["InvalidArgumentError"] * 2, results
    assert "overlap" in results[0]["message"] and "model/w" in results[0]["message"]


class _Refusing(tp.sharding.ShardingCallback):
    @property
    def description(self) -> str:
        return "refuses on rank 1"

    def __call__(self, shardable_tensors):
        import torch.distributed as dist

        if dist.get_rank() == 1:
            raise OSError(28, "No space left on device")
        return [{t.checkpoint_key: {t.slice_spec: t.tensor} for t in shardable_tensors}]


def _failing_second_save(rank: int, world: int, work: str) -> list:
    init_gloo(rank, world, os.path.join(work, "init"))
    m = model(rank, world, 1.0)
    manager = tp.CheckpointManager(tp.Checkpoint(model=m), os.path.join(work, "run"), max_to_keep=3)
    first = manager.save()
    start, stop = rows(rank, world)
    m.w.assign(full_value(2)[start:stop])
    try:
        manager.save(options=tp.CheckpointOptions(experimental_sharding_callback=_Refusing()))
    except tp.errors.WriteError as exc:
        return [first, type(exc).__name__, str(exc), manager.latest_checkpoint]
    return [first, None, None, manager.latest_checkpoint]


def test_a_rank_that_fails_makes_every_rank_raise_and_nothing_is_committed(tmp_path):
    results = run_ranks(_failing_second_save, 2, str(tmp_path), str(tmp_path))
    assert all("value" in r for r in results), results
    for first, error, message, latest in (r["value"] for r in results):
        assert error in ("WriteError", "CoordinationError") and "No space left" in message
        assert latest == first
    assert tp.latest_checkpoint(str(tmp_path / "run")) == results[0]["value"][0]
    names = os.listdir(tmp_path / "run")
    assert not any(n.startswith("ckpt-2") for n in names) and not any(".tp-tmp-" in n for n in names), names


def _io_rank_save(rank: int, world: int, work: str) -> str:
    init_gloo(rank, world, os.path.join(work, "init"))
    m = model(rank, world, 5.0)
    options = tp.CheckpointOptions(experimental_io_device=f"/job:worker/task:{world - 1}")
    return tp.Checkpoint(model=m).write(os.path.join(work, "io", "ckpt"), options=options)


def test_the_io_device_rank_writes_every_file(tmp_path):
    results = run_ranks(_io_rank_save, 3, str(tmp_path), str(tmp_path))
    assert all("value" in r for r in results), results
    path = results[0]["value"]
    assert sorted(n for n in os.listdir(tmp_path / "io") if ".data-" in n) == ["ckpt.data-00000-of-00001"]
    np.testing.assert_array_equal(tp.load_variable(path, W_KEY), full_value(5))


def _policy_save(rank: int, world: int, work: str, policy: str) -> str:
    from trackpoint import sharding

    init_gloo(rank, world, os.path.join(work, "init"))
    callback = sharding.ShardByTaskPolicy() if policy == "task" else sharding.MaxShardSizePolicy(max_shard_size=160)
    options = tp.CheckpointOptions(experimental_sharding_callback=callback)
    return tp.Checkpoint(model=model(rank, world, 6.0)).write(os.path.join(work, policy, "ckpt"), options=options)


@pytest.mark.parametrize("policy", ["task", "size"])
def test_sharding_policies_shard_within_each_rank(tmp_path, policy):
    """ShardByTaskPolicy: one data file per rank. MaxShardSizePolicy: a rank splits its part into
    files of at most the limit (a tensor larger than it alone in one), numbered across the ranks."""
    results = run_ranks(_policy_save, 2, str(tmp_path), str(tmp_path), policy)
    assert all("value" in r for r in results), results
    path = results[0]["value"]
    files = sorted(n for n in os.listdir(tmp_path / policy) if ".data-" in n)
    count = len(files)
    assert files == [f"ckpt.data-{i:05d}-of-{count:05d}" for i in range(count)]
    if policy == "task":
        assert count == 2
    else:
        assert count > 4  # 9 replicated vectors of 56 to 504 bytes and two 144-byte slices, 160-byte files
        with BundleReader(path) as reader:
            ranks_files = {
                reader.entry(f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE").shard_id for i in range(REPLICATED)
            }
        assert len(ranks_files) > 2
    np.testing.assert_array_equal(tp.load_variable(path, W_KEY), full_value(6))
    for i in range(REPLICATED):
        assert tp.load_variable(path, f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE")[0] == 6 + i


def test_a_process_saving_one_block_alone_is_refused(tmp_path) -> None:
    m = tp.Module()
    m.w = ShardedVariable(np.ones((2, 3), np.float32), (4, 3), (0, 0))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'model/w/.*cover 6 of its 12.*coordinator") as caught:
        tp.Checkpoint(model=m).write(str(tmp_path / "ckpt"), tp.CheckpointOptions(coordinator=False))
    assert caught.value.key.startswith("model/w/")
    assert not os.listdir(tmp_path)
    m.w = ShardedVariable(np.ones((4, 3), np.float32), (4, 3), (0, 0))  # the whole tensor: fine alone
    tp.Checkpoint(model=m).write(str(tmp_path / "ckpt"))
    assert tp.load_variable(str(tmp_path / "ckpt"), "model/w/.ATTRIBUTES/VARIABLE_VALUE").shape == (4, 3)
