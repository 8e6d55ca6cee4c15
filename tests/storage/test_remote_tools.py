"""The command line, the conversion and rewrite tools and ``trackpoint.torch`` at s3:// URLs, against
moto's S3 server: what they write is at the URL (nothing under a local ``s3:`` directory), and what
they read there reads as it does from a local copy."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.cli import main

pytestmark = pytest.mark.slow  # the tools and the CLI on URLs, torch objects through the S3 server: seconds each

KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch) -> None:
    """Run from an empty directory: a URL taken for a local path would show up in it as ``s3:``."""
    monkeypatch.chdir(tmp_path)
    yield
    assert "s3:" not in os.listdir(tmp_path)


def _model(scale: float = 1.0) -> tp.Module:
    m = tp.Module()
    m.w = tp.Variable(np.arange(12, dtype=np.float32).reshape(3, 4) * scale)
    m.b = tp.Variable(np.ones(4, np.float64) * scale)
    return m


def test_trackpoint_inspect_tree_verify_and_diff_read_a_url(bucket, capsys) -> None:
    """``trackpoint inspect s3://...`` as a user types it (a new process, the endpoint from the
    environment), and the other reading commands in process, on a prefix and a directory URL."""
    url = tp.Checkpoint(model=_model()).save(f"{bucket}/run/ckpt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    shown = subprocess.run(
        [sys.executable, "-m", "trackpoint", "inspect", f"{bucket}/run"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert KEY in shown.stdout and "float32  [3,4]" in shown.stdout
    assert main(["tree", url]) == 0 and "w  float32[3,4]" in capsys.readouterr().out
    assert main(["verify", f"{bucket}/run"]) == 0 and "every checksum verified" in capsys.readouterr().out
    other = tp.Checkpoint(model=_model(2.0)).write(f"{bucket}/other/ckpt-1")
    assert main(["diff", url, other]) == 1 and "model.w" in capsys.readouterr().out


def test_a_missing_url_lists_the_checkpoints_that_are_there(bucket, capsys) -> None:
    tp.Checkpoint(model=_model()).save(f"{bucket}/run/ckpt")
    assert main(["inspect", f"{bucket}/run/ckpt-9"]) == 1
    err = capsys.readouterr().err
    assert f"no checkpoint at {bucket}/run/ckpt-9" in err and "checkpoints in" in err and "ckpt-1" in err


@pytest.mark.parametrize("shard_size", ["1GB", "40B"], ids=["one-file", "sharded"])
def test_convert_to_safetensors_at_a_url_and_back(bucket, s3, tmp_path, shard_size) -> None:
    model = _model()
    url = tp.Checkpoint(model=model).write(f"{bucket}/run/ckpt-1")
    assert main(["convert", url, f"{bucket}/hf", "--shard-size", shard_size]) == 0
    s3.invalidate_cache()
    names = sorted(p.rsplit("/", 1)[1] for p in s3.ls(f"{bucket[5:]}/hf"))
    local = tmp_path / "local"
    assert main(["convert", url, str(local), "--shard-size", shard_size]) == 0
    assert names == sorted(os.listdir(local))  # the same files
    for name in names:
        assert s3.cat_file(f"{bucket[5:]}/hf/{name}") == (local / name).read_bytes()
    source = f"{bucket}/hf/" + ("model.safetensors" if len(names) == 1 else "model.safetensors.index.json")
    assert main(["convert", source, f"{bucket}/back/ckpt"]) == 0
    np.testing.assert_array_equal(tp.load_variable(f"{bucket}/back/ckpt", KEY), model.w.numpy())
    # Other weights converted into the same place are refused (objects are never overwritten),
    # and the first stay whole.
    other = tp.Checkpoint(model=_model(5.0)).write(f"{bucket}/run/ckpt-2")
    assert main(["convert", other, f"{bucket}/hf", "--shard-size", shard_size]) == 1
    s3.invalidate_cache()
    for name in names:
        assert s3.cat_file(f"{bucket[5:]}/hf/{name}") == (local / name).read_bytes()


def test_rewrite_and_average_write_to_a_url(bucket, capsys) -> None:
    first = tp.Checkpoint(model=_model(1.0)).write(f"{bucket}/run/ckpt-1")
    second = tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/run/ckpt-2")
    assert main(["rewrite", first, f"{bucket}/out/cast", "--cast", "model=float16"]) == 0
    assert tp.load_variable(f"{bucket}/out/cast", KEY).dtype == np.float16
    assert main(["average", first, second, "-o", f"{bucket}/out/mean"]) == 0
    assert tp.load_variable(f"{bucket}/out/mean", KEY)[0, 1] == 2.0
    assert tp.verify_checkpoint(f"{bucket}/out/mean") == []


def test_torch_objects_save_to_and_load_from_a_url(bucket) -> None:
    torch = pytest.importorskip("torch")
    import trackpoint.torch as tpt

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    net(torch.ones(2, 4)).sum().backward()
    opt.step()
    manager = tp.CheckpointManager(tpt.Checkpoint(model=net, optimizer=opt), f"{bucket}/torch", max_to_keep=2)
    path = manager.save()
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.01)
    again = tp.CheckpointManager(tpt.Checkpoint(model=fresh, optimizer=fresh_opt), f"{bucket}/torch", max_to_keep=2)
    assert again.restore_or_initialize() == path
    for a, b in zip(net.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], fresh_opt.state_dict()["state"][0]["exp_avg"])
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    assert tpt.load_state_dict(other, f"{bucket}/torch") == tpt.IncompatibleKeys([], [], [])
    assert torch.equal(other[2].weight, net[2].weight)


def test_trackpoint_merge_reads_parts_at_a_url_and_writes_the_checkpoint_there(bucket, s3) -> None:
    """Parts left at a URL by a multi-device save, merged into one checkpoint at a URL, which TF's
    layout rules and the tensors' values survive."""
    parts = [
        tp.save_tensors(f"{bucket}/ck_temp/part-0000{i}-of-00002", {f"t{i}": np.arange(4) + 10 * i}) for i in range(2)
    ]
    assert main(["merge", *parts, "-o", f"{bucket}/merged/ck"]) == 0
    np.testing.assert_array_equal(tp.load_variable(f"{bucket}/merged/ck", "t0"), np.arange(4))
    np.testing.assert_array_equal(tp.load_variable(f"{bucket}/merged/ck", "t1"), np.arange(4) + 10)
    assert tp.verify_checkpoint(f"{bucket}/merged/ck") == []
    s3.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[1] for p in s3.find(f"{bucket[5:]}/merged")) == [
        "ck.data-00000-of-00002",
        "ck.data-00001-of-00002",
        "ck.index",
    ]
