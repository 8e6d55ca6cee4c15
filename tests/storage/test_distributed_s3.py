"""Saves of several processes to the S3 server: each rank uploads its own data objects, the
root's conditional index is the commit, and ranks at another world size restore from there."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import trackpoint as tp
from tests.distributed.ranks import REPLICATED, assign_step, full_value, init_gloo, model, rows, run_ranks
from trackpoint._storage.temps import TEMP_MARKER

pytestmark = pytest.mark.slow
W_KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def _options(url: str, endpoint: str) -> None:
    # A rank is forked from a server started before the fixture set fsspec's environment.
    tp.set_storage_options(url, endpoint_url=endpoint, key="testing", secret="testing")


def _save(rank: int, world: int, work: str, url: str, endpoints: list[str], saves: int) -> list:
    _options(url, endpoints[rank])
    # A temporary directory of its own, as on machines of their own: no rank sees another's
    # local files, so each must upload its own data objects.
    tempfile.tempdir = os.path.join(work, f"tmp-{rank}")
    os.makedirs(tempfile.tempdir)
    init_gloo(rank, world, os.path.join(work, "init"))
    m = model(rank, world, 0.0)
    manager = tp.CheckpointManager(tp.Checkpoint(model=m), f"{url}/run", max_to_keep=2)
    paths = []
    for step in range(1, saves + 1):
        assign_step(m, rank, world, step)
        paths.append(manager.save())
    return [paths, manager.checkpoints]


def _restore(rank: int, world: int, url: str, endpoint: str, path: str) -> list:
    _options(url, endpoint)
    m = model(rank, world, -1.0)
    tp.Checkpoint(model=m).restore(path).assert_consumed()
    return [m.w.numpy().tolist(), [float(v.numpy()[0]) for v in m.rest]]


def test_two_ranks_save_to_s3_and_four_restore_from_it(tmp_path, bucket, s3, s3_endpoint, proxy) -> None:
    # Rank 1 reaches the server through the logging proxy, rank 0 directly.
    results = run_ranks(_save, 2, str(tmp_path), str(tmp_path), bucket, [s3_endpoint, proxy.endpoint], 3)
    assert all("value" in r for r in results), results
    assert results[0]["value"] == results[1]["value"], "every rank returns the same paths"
    paths, kept = results[0]["value"]
    assert kept == paths[-2:] == [f"{bucket}/run/ckpt-2", f"{bucket}/run/ckpt-3"]
    names = sorted(p.rsplit("/", 1)[-1] for p in s3.ls(f"{bucket[5:]}/run"))
    assert names == [
        "checkpoint",
        *(f"ckpt-{n}.{kind}" for n in (2, 3) for kind in ("data-00000-of-00002", "data-00001-of-00002", "index")),
    ], "each rank's data object once, no temporaries, max_to_keep applied by the committing rank"
    assert not any(os.listdir(tmp_path / f"tmp-{r}") for r in range(2)), "the local staging files are gone"
    put = {path.rsplit("/", 1)[-1] for method, path, _ in proxy.requests if method in ("PUT", "POST")}
    assert {f"ckpt-{n}.data-00001-of-00002" for n in (1, 2, 3)} <= put, "rank 1 uploads its own data objects"
    assert not any(".index" in name or "data-00000" in name for name in put), "and nothing else"
    latest = tp.latest_checkpoint(f"{bucket}/run")
    assert latest == paths[-1]
    np.testing.assert_array_equal(tp.load_variable(latest, W_KEY), full_value(3))
    for i in range(REPLICATED):
        assert tp.load_variable(latest, f"model/rest/{i}/.ATTRIBUTES/VARIABLE_VALUE")[0] == 3 + i

    blocks = run_ranks(_restore, 4, str(tmp_path), bucket, s3_endpoint, latest)
    for r, result in enumerate(blocks):
        assert "value" in result, result
        block, rest = result["value"]
        start, stop = rows(r, 4)
        np.testing.assert_array_equal(np.array(block, np.float32), full_value(3)[start:stop])
        assert rest == [3.0 + i for i in range(REPLICATED)]


def _dcp_save(rank: int, world: int, work: str, url: str, endpoints: list[str]) -> None:
    import torch.distributed.checkpoint as dcp

    from tests.distributed.test_dcp_bridge import _state
    from trackpoint.torch import TFStorageWriter

    _options(url, endpoints[rank])
    tempfile.tempdir = os.path.join(work, f"dcp-tmp-{rank}")  # as on machines of their own
    os.makedirs(tempfile.tempdir)
    init_gloo(rank, world, os.path.join(work, "init-dcp"))
    dcp.save(_state(rank, world, None), storage_writer=TFStorageWriter(f"{url}/dcp/ckpt"))


def _dcp_load(rank: int, world: int, work: str, url: str, endpoint: str) -> list:
    import torch.distributed.checkpoint as dcp

    from tests.distributed.test_dcp_bridge import _state
    from trackpoint.torch import TFStorageReader

    _options(url, endpoint)
    init_gloo(rank, world, os.path.join(work, f"init-dcp-load-{world}"))
    state = _state(rank, world, -1.0)
    dcp.load(state, storage_reader=TFStorageReader(f"{url}/dcp/ckpt"))
    return [state["model"]["w"].to_local().numpy().tolist(), state["model"]["b"].tolist(), state["epoch"]]


def test_dcp_ranks_save_to_s3_each_uploading_its_own_data(tmp_path, bucket, s3, s3_endpoint, proxy) -> None:
    """torch.distributed.checkpoint through TFStorageWriter at a URL, ranks with local files of
    their own: rank 1 puts its data object, the coordinator its own and the index last."""
    from tests.distributed.test_dcp_bridge import FULL, _full

    results = run_ranks(_dcp_save, 2, str(tmp_path), str(tmp_path), bucket, [s3_endpoint, proxy.endpoint])
    assert all("value" in r for r in results), results
    url = f"{bucket}/dcp/ckpt"
    s3.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[-1] for p in s3.ls(f"{bucket[5:]}/dcp")) == [
        "ckpt.data-00000-of-00002",
        "ckpt.data-00001-of-00002",
        "ckpt.index",
    ]
    put = {path.rsplit("/", 1)[-1] for method, path, _ in proxy.requests if method in ("PUT", "POST")}
    assert put == {"ckpt.data-00001-of-00002"}, "rank 1 uploads its own data object, and nothing else"
    staged = [n for r in range(2) for n in os.listdir(tmp_path / f"dcp-tmp-{r}") if TEMP_MARKER in n]
    assert staged == [], "the local staging files are gone"
    assert dict(tp.list_variables(url))["model.w"] == list(FULL)
    np.testing.assert_array_equal(tp.load_variable(url, "model.w"), _full())
    assert tp.verify_checkpoint(url) == []
    loaded = run_ranks(_dcp_load, 4, str(tmp_path), str(tmp_path), bucket, s3_endpoint)
    for r, result in enumerate(loaded):
        assert "value" in result, result
        w, b, epoch = result["value"]
        np.testing.assert_array_equal(np.array(w, np.float32), _full()[2 * r : 2 * r + 2])
        assert b == [7.0] * 5 and epoch == 4
