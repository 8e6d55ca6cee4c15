"""A real S3-compatible server (moto's server mode) on 127.0.0.1 for the object-store tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.storage.proxy import Proxy

# gcsfs's default filesystem class first asks a gs:// endpoint over gRPC whether a bucket is
# zonal; the fake GCS below speaks only the JSON API. Set before gcsfs is imported.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
s3fs = pytest.importorskip("s3fs", reason="s3fs is in the test extra")


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The server's URL; dummy credentials and the endpoint reach fsspec through its environment
    configuration, as a user's would."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "FSSPEC_S3_ENDPOINT_URL")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", FSSPEC_S3_ENDPOINT_URL=endpoint)
    import fsspec.config

    fsspec.config.set_conf_env(fsspec.config.conf)  # the environment is read at import; read it again
    try:
        yield endpoint
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        fsspec.config.conf.pop("s3", None)


@pytest.fixture()
def bucket(s3_endpoint: str) -> str:
    """A new, empty bucket: ``s3://<name>``."""
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing")
    name = f"tp-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    fs.invalidate_cache()
    return f"s3://{name}"


@pytest.fixture()
def s3(s3_endpoint: str) -> s3fs.S3FileSystem:
    """A client of the server, for putting and inspecting objects beside trackpoint."""
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing", skip_instance_cache=True)
    return fs


@pytest.fixture()
def proxy(s3_endpoint: str) -> Iterator[Proxy]:
    """A :class:`Proxy` in front of the server, and fsspec pointed at it for the test."""
    import fsspec.config

    front = Proxy(s3_endpoint)
    options = fsspec.config.conf.setdefault("s3", {})
    saved = options.get("endpoint_url")
    options["endpoint_url"] = front.endpoint
    try:
        yield front
    finally:
        options["endpoint_url"] = saved
        front.close()


@pytest.fixture()
def bare(monkeypatch, s3_endpoint, proxy) -> None:
    """No endpoint in fsspec's configuration and no credentials in the environment: a URL reaches
    the server only with the options trackpoint was given for it."""
    import fsspec.config

    monkeypatch.setitem(fsspec.config.conf, "s3", {})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "FSSPEC_S3_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[object]:
    """A :class:`tests.storage.fake_gcs.FakeGCS`: the emulator, preconditions checked before it."""
    pytest.importorskip("gcsfs", reason="gcsfs is in the test extra")
    pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator is in the test extra")
    from tests.storage.fake_gcs import FakeGCS

    fake = FakeGCS()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture()
def gcs_bucket(fake_gcs) -> Iterator[str]:
    """A new bucket on the fake GCS, ``gs://<name>``, its options set with tp.set_storage_options."""
    import gcsfs

    import trackpoint as tp

    name = f"tp-{uuid.uuid4().hex[:12]}"
    gcsfs.GCSFileSystem(endpoint_url=fake_gcs.direct, token="anon", skip_instance_cache=True).mkdir(name)
    tp.set_storage_options(f"gs://{name}", endpoint_url=fake_gcs.endpoint, token="anon")
    try:
        yield f"gs://{name}"
    finally:
        tp.set_storage_options(f"gs://{name}")


@pytest.fixture(params=["process", "thread"])
def downloader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Who runs the whole downloads of the test: the download process (running before the test
    starts) or a thread of this process (the process switched off)."""
    from trackpoint._storage import download_process

    if request.param == "thread":
        monkeypatch.setattr(download_process, "ENABLED", False)
    else:
        assert download_process.started(60.0) is not None, "the download process did not start within 60 s"
    return str(request.param)
