"""The ``storage_options=`` keyword of every public API that takes a path, and the CLI's
``--storage-option KEY=VALUE``, against moto's S3 server with nothing else configured (the
``bare`` fixture): no endpoint in fsspec's configuration, no credentials in the environment.
Options that point at the forwarding proxy show, by its log, which requests used them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage import storage_options as registry
from trackpoint.cli import main

pytestmark = pytest.mark.slow  # saves and restores through the S3 server, the CLI in child processes: seconds each

KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _forget(bucket: str) -> None:
    """Forget every registration for ``bucket`` and the URLs in it."""
    for prefix in [p for p in registry._by_prefix if p == bucket or p.startswith(bucket + "/")]:
        tp.set_storage_options(prefix)


@pytest.fixture()
def clean(bucket: str) -> Iterator[None]:
    """Registrations a test makes for its bucket do not outlive it."""
    try:
        yield
    finally:
        _forget(bucket)


@pytest.fixture()
def server(s3_endpoint: str) -> dict[str, str]:
    """Options that reach the server directly."""
    return {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}


@pytest.fixture()
def via_proxy(proxy) -> dict[str, str]:
    """Options that reach the server through the proxy, whose log shows who used them."""
    return {"endpoint_url": proxy.endpoint, "key": "testing", "secret": "testing"}


def _model(value: float) -> tp.Module:
    m = tp.Module()
    m.w = tp.Variable(np.full((4, 4), value, np.float32))
    return m


def _gone(bucket: str, proxy) -> int:
    """Forget the options (a later use must bring its own); the proxy's request count so far."""
    _forget(bucket)
    return len(proxy.requests)


# -- writing ------------------------------------------------------------------------------


def test_a_manager_saves_with_its_options_in_the_foreground_and_on_the_writer_thread(
    bare, bucket, s3, via_proxy, proxy, clean
) -> None:
    manager = tp.CheckpointManager(
        tp.Checkpoint(model=_model(1.0)), f"{bucket}/run", max_to_keep=3, storage_options=via_proxy
    )
    first = manager.save()
    second = manager.save(options=tp.CheckpointOptions(enable_async=True))
    manager.sync()
    assert (first, second) == (f"{bucket}/run/ckpt-1", f"{bucket}/run/ckpt-2")
    s3.invalidate_cache()
    assert {p.rsplit("/", 1)[1] for p in s3.ls(f"{bucket[5:]}/run")} >= {"checkpoint", "ckpt-2.index"}
    written = [path for method, path, _ in proxy.requests if method == "PUT"]
    assert any(p.endswith("/run/ckpt-2.index") for p in written)  # from the writer thread
    assert any(p.endswith("/run/checkpoint") for p in written)
    # A new manager of the directory reads what the first wrote, with the options given to it.
    _gone(bucket, proxy)
    again = tp.CheckpointManager(tp.Checkpoint(model=_model(0.0)), f"{bucket}/run", 3, storage_options=via_proxy)
    assert again.latest_checkpoint == second and again.checkpoints == [first, second]


def test_a_manager_keeps_its_options_to_its_directory(bare, bucket, server, via_proxy, proxy, clean) -> None:
    """Registered for the directory itself, not for its parent (the bucket): options set for the
    bucket stay in force beside it, and the directory's do not reach its siblings."""
    tp.set_storage_options(bucket, **server)
    manager = tp.CheckpointManager(tp.Checkpoint(model=_model(1.0)), f"{bucket}/run", 2, storage_options=via_proxy)
    manager.save()
    before = len(proxy.requests)
    assert before > 0  # the manager's requests went through the proxy
    beside = tp.Checkpoint(model=_model(2.0)).write(f"{bucket}/other/ckpt-1")
    assert tp.load_variable(beside, KEY)[0, 0] == 2.0
    assert len(proxy.requests) == before  # the bucket's own options: straight to the server


def test_write_and_save_tensors_take_storage_options(bare, bucket, s3, server, clean) -> None:
    written = tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/w/weights", storage_options=server)
    _forget(bucket)
    plain = tp.save_tensors(f"{bucket}/plain/t", {"x": np.arange(5)}, storage_options=server)
    s3.invalidate_cache()
    assert s3.exists(f"{written[5:]}.index") and s3.exists(f"{plain[5:]}.index")


def test_a_save_to_an_object_in_the_bucket_root_registers_the_bucket(bare, bucket, server, clean) -> None:
    saved = tp.Checkpoint(model=_model(4.0)).save(f"{bucket}/ckpt", storage_options=server)
    assert saved == f"{bucket}/ckpt-1"
    assert registry.options_for(f"{bucket}/checkpoint") == server
    assert tp.latest_checkpoint(bucket) == saved


# -- reading ------------------------------------------------------------------------------


def test_every_reader_takes_storage_options(bare, bucket, via_proxy, proxy, clean) -> None:
    saved = tp.Checkpoint(model=_model(5.0)).save(f"{bucket}/run/ckpt", storage_options=via_proxy)
    directory = f"{bucket}/run"

    count = _gone(bucket, proxy)
    assert tp.latest_checkpoint(directory, storage_options=via_proxy) == saved
    assert len(proxy.requests) > count
    _gone(bucket, proxy)
    state = tp.get_checkpoint_state(directory, storage_options=via_proxy)
    assert state is not None and state.model_checkpoint_path == saved
    _gone(bucket, proxy)
    assert tp.load_variable(saved, KEY, storage_options=via_proxy)[0, 0] == 5.0
    _gone(bucket, proxy)
    assert (KEY, [4, 4]) in tp.list_variables(directory, storage_options=via_proxy)
    _gone(bucket, proxy)
    with tp.load_checkpoint(saved, storage_options=via_proxy) as reader:
        assert reader.get_tensor(KEY)[0, 0] == 5.0
    _gone(bucket, proxy)
    with tp.CheckpointReader(saved, storage_options=via_proxy) as reader:
        assert reader.has_tensor(KEY)
    _gone(bucket, proxy)
    with tp.CheckpointView(directory, storage_options=via_proxy) as view:
        assert "(root).model.w" in view.paths().values()
    _gone(bucket, proxy)
    assert tp.verify_checkpoint(saved, storage_options=via_proxy) == []
    _gone(bucket, proxy)
    assert tp.repair_checkpoint(saved, storage_options=via_proxy) is False
    twin = tp.Checkpoint(model=_model(5.0)).write(f"{bucket}/twin/ckpt-1", storage_options=via_proxy)
    _gone(bucket, proxy)
    with tp.CheckpointView(twin, storage_options=via_proxy) as view:
        result = view.diff(saved, storage_options=via_proxy)
    assert result.added == ("(root).save_counter",) and not result.changed  # a save()'s counter only


def test_restore_and_read_take_storage_options(bare, bucket, via_proxy, proxy, clean) -> None:
    saved = tp.Checkpoint(model=_model(6.0)).save(f"{bucket}/run/ckpt", storage_options=via_proxy)
    count = _gone(bucket, proxy)
    restored = _model(0.0)
    tp.Checkpoint(model=restored).restore(f"{bucket}/run", storage_options=via_proxy).assert_consumed()
    assert restored.w.numpy()[0, 0] == 6.0 and len(proxy.requests) > count
    _gone(bucket, proxy)
    read = _model(0.0)
    tp.Checkpoint(model=read).read(saved, storage_options=via_proxy).expect_partial()
    assert read.w.numpy()[0, 0] == 6.0


def test_a_deferred_restore_reads_its_values_with_the_options_after_the_call(
    bare, bucket, via_proxy, proxy, clean
) -> None:
    """A value for an object created after ``restore`` returns is read then, from the data object
    at the URL: the options given to the call are still there for it."""
    saved = tp.Checkpoint(model=_model(7.0)).save(f"{bucket}/run/ckpt", storage_options=via_proxy)
    _gone(bucket, proxy)
    late = tp.Module()
    tp.Checkpoint(model=late).restore(saved, storage_options=via_proxy)
    returned = len(proxy.requests)
    late.w = tp.Variable(np.zeros((4, 4), np.float32))  # created now: its value is read now
    assert late.w.numpy()[0, 0] == 7.0
    after = [path for _, path, _ in proxy.requests[returned:]]
    assert f"/{bucket[5:]}/run/ckpt-1.data-00000-of-00001" in after


def test_the_tools_take_storage_options_for_their_urls_only(bare, bucket, server, tmp_path, clean) -> None:
    """A source at a URL and a local destination (or the other way round) in one call: the
    options go to the URL, the local path takes none."""
    saved = tp.Checkpoint(model=_model(8.0)).write(f"{bucket}/run/ckpt-1", storage_options=server)
    _forget(bucket)
    local = tmp_path / "hf"
    tp.convert(saved, str(local), storage_options=server)
    _forget(bucket)
    back = tp.convert(str(local), f"{bucket}/back/ckpt", storage_options=server)
    assert back.files
    _forget(bucket)
    out = tp.rewrite(
        f"{bucket}/back/ckpt", f"{bucket}/renamed/ckpt", rename={"model/w": "model/v"}, storage_options=server
    )
    _forget(bucket)
    average = tp.average([saved, saved], f"{bucket}/avg/ckpt", storage_options=server)
    assert tp.load_variable(average, KEY)[0, 0] == 8.0
    _forget(bucket)
    assert "model/v/.ATTRIBUTES/VARIABLE_VALUE" in dict(tp.list_variables(out, storage_options=server))
    _forget(bucket)
    part = tp.save_tensors(str(tmp_path / "part-0"), {"x": np.ones(2)})
    merged = tp.merge([part], f"{bucket}/merged/ckpt", storage_options=server)
    assert tp.load_variable(merged, "x", storage_options=server).tolist() == [1.0, 1.0]


def test_trackpoint_torch_takes_storage_options(bare, bucket, server, clean) -> None:
    torch = pytest.importorskip("torch")
    import trackpoint.torch as tpt

    model = torch.nn.Linear(3, 2)
    saved = tpt.Checkpoint(model=model).save(f"{bucket}/run/ckpt", storage_options=server)
    _forget(bucket)
    fresh = torch.nn.Linear(3, 2)
    assert tpt.load_state_dict(fresh, saved, storage_options=server).missing_keys == []
    assert torch.equal(fresh.weight, model.weight)
    _forget(bucket)
    # The DCP storage registers the options when made, for the prefix given then or later.
    reader = tpt.TFStorageReader("unused", storage_options=None)
    tpt.TFStorageWriter(f"{bucket}/dcp/ckpt", storage_options=server)
    assert registry.options_for(f"{bucket}/dcp/ckpt.index") == server
    with pytest.raises(tp.errors.InvalidArgumentError, match="local paths take no storage options"):
        tpt.TFStorageReader("run/ckpt", storage_options=server)
    reader.reset(f"{bucket}/elsewhere/ckpt")  # no options were given: nothing registered
    assert registry.options_for(f"{bucket}/elsewhere/ckpt.index") == {}


# -- the command line -----------------------------------------------------------------------


def _bare_env() -> dict[str, str]:
    """This process's environment without a credential, an endpoint or a configuration of AWS or fsspec."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_CONFIG_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",  # no wait for an instance's credentials
    )
    return env


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trackpoint", *argv],
        env=_bare_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_cli_reads_a_url_with_storage_options_and_nothing_else(bare, bucket, server, s3_endpoint, clean) -> None:
    tp.Checkpoint(model=_model(9.0)).save(f"{bucket}/run/ckpt", storage_options=server)
    flags = [f"--storage-option=endpoint_url={s3_endpoint}", "--storage-option", "key=testing"]
    shown = _cli("inspect", f"{bucket}/run", *flags, "--storage-option", "secret=testing")
    assert shown.returncode == 0, shown.stderr
    assert KEY in shown.stdout and "float32  [4,4]" in shown.stdout
    # Before the subcommand too, and a JSON value.
    shown = _cli(
        *flags, "--storage-option", "secret=testing", "--storage-option", "use_ssl=false", "tree", f"{bucket}/run"
    )
    assert shown.returncode == 0 and "w  float32[4,4]" in shown.stdout, shown.stderr
    # Without them the same command has nothing to reach the server with.
    assert _cli("inspect", f"{bucket}/run").returncode == 1


def test_cli_storage_options_apply_to_every_url_argument(bare, bucket, server, s3_endpoint, clean, capsys) -> None:
    a = tp.Checkpoint(model=_model(1.0)).write(f"{bucket}/a/ckpt-1", storage_options=server)
    b = tp.Checkpoint(model=_model(2.0)).write(f"{bucket}/b/ckpt-1", storage_options=server)
    _forget(bucket)
    options = [
        "--storage-option",
        f"endpoint_url={s3_endpoint}",
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
        "--storage-option",
        'client_kwargs={"region_name": "us-east-1"}',
    ]
    assert main(["diff", a, b, *options]) == 1 and "model.w" in capsys.readouterr().out
    assert registry.options_for(f"{bucket}/b/ckpt-1.index")["client_kwargs"] == {"region_name": "us-east-1"}
    _forget(bucket)
    assert main(["average", a, b, "-o", f"{bucket}/avg/ckpt", *options]) == 0
    assert tp.load_variable(f"{bucket}/avg/ckpt", KEY, storage_options=server)[0, 0] == 1.5


# -- bad input -------------------------------------------------------------------------------


def test_storage_options_that_are_not_a_mapping_of_str_are_refused() -> None:
    with pytest.raises(
        tp.errors.InvalidArgumentError, match=r"s3://bucket/run/ckpt-1: storage_options must be a mapping"
    ):
        tp.load_variable("s3://bucket/run/ckpt-1", KEY, storage_options=[("key", "hunter2")])  # type: ignore[arg-type]
    with pytest.raises(tp.errors.InvalidArgumentError, match="keys of type int") as info:
        tp.Checkpoint().save("s3://bucket/run/ckpt", storage_options={1: "hunter2"})  # type: ignore[dict-item]
    assert "hunter2" not in str(info.value)  # values may be secrets
    assert registry.options_for("s3://bucket/run/ckpt-1.index") == {}


def test_storage_options_for_a_local_path_are_refused(tmp_path) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="local paths take no storage options") as info:
        tp.save_tensors(str(tmp_path / "t"), {"x": np.ones(1)}, storage_options={"secret": "hunter2"})
    assert str(tmp_path / "t") in str(info.value) and "hunter2" not in str(info.value)
    assert not list(tmp_path.iterdir())  # refused before anything was written
    with pytest.raises(tp.errors.InvalidArgumentError, match="local paths take no storage options"):
        tp.CheckpointManager(tp.Checkpoint(), str(tmp_path), 1, storage_options={"key": "x"})
    with pytest.raises(tp.errors.InvalidArgumentError, match="none of these is a URL"):
        tp.merge([str(tmp_path / "a")], str(tmp_path / "b"), storage_options={"key": "x"})
    # None and an empty mapping ask for nothing, locally too.
    prefix = tp.save_tensors(str(tmp_path / "u"), {"x": np.ones(1)}, storage_options={})
    assert tp.load_variable(prefix, "x", storage_options=None).tolist() == [1.0]


def test_a_malformed_cli_storage_option_is_a_usage_error(capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["inspect", "s3://bucket/run", "--storage-option", "hunter2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "expected KEY=VALUE" in err and "hunter2" not in err
    with pytest.raises(SystemExit) as info:
        main(["--storage-option", "=x", "inspect", "s3://bucket/run"])
    assert info.value.code == 2 and "no KEY before '='" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path), "--storage-option", "key=x"]) == 2
    assert "--storage-option applies to URL arguments" in capsys.readouterr().err


# -- where the options go ------------------------------------------------------------------------


@pytest.fixture()
def names() -> Iterator[str]:
    """A bucket name of its own, forgotten afterwards (no server involved)."""
    bucket = f"s3://tp-scope-{os.urandom(4).hex()}"
    try:
        yield bucket
    finally:
        _forget(bucket)


def test_options_are_registered_for_the_parent_never_above_the_bucket(names) -> None:
    bucket = names
    registry.use_storage_options(f"{bucket}/run/ckpt-1", {"key": "run"})
    assert registry.options_for(f"{bucket}/run/ckpt-1.index") == {"key": "run"}
    assert registry.options_for(f"{bucket}/run/checkpoint") == {"key": "run"}
    assert registry.options_for(f"{bucket}/other/ckpt-1.index") == {}
    registry.use_storage_options(f"{bucket}/ckpt-1", {"key": "root"})
    registry.use_storage_options(bucket, {"key": "root"})
    assert {p for p in registry._by_prefix if p.startswith(bucket)} == {bucket, f"{bucket}/run"}
    assert registry.options_for(f"{bucket}/ckpt-1.index") == {"key": "root"}
    registry.use_storage_options(f"{bucket}/run", {"key": "dir"}, directory=True)
    assert registry.options_for(f"{bucket}/run/ckpt-1.index") == {"key": "dir"}  # the latest for a prefix wins
    registry.use_storage_options(f"{bucket}/run/x", None)
    registry.use_storage_options(f"{bucket}/run/x", {})
    assert registry.options_for(f"{bucket}/run/ckpt-1.index") == {"key": "dir"}  # nothing asked, nothing changed
