"""``tp.set_storage_options``: credentials and an endpoint per URL prefix, with nothing in the
environment or fsspec's configuration, against moto's S3 server (one bucket reached through the
forwarding proxy, to show which options each URL used)."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp

KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def _model(value: float) -> tp.Module:
    m = tp.Module()
    m.w = tp.Variable(np.full((8, 8), value, np.float32))
    return m


@pytest.mark.slow  # async saves to two prefixes through the S3 server: about a second
def test_each_prefix_uses_its_own_options_on_writer_threads_too(bare, bucket, s3, s3_endpoint, proxy) -> None:
    other = f"s3://{bucket[5:]}-b"
    s3.mkdir(other[5:])
    credentials = {"key": "testing", "secret": "testing"}
    tp.set_storage_options(f"{bucket}/run", endpoint_url=proxy.endpoint, **credentials)
    tp.set_storage_options(other, endpoint_url=s3_endpoint, **credentials)
    try:
        manager = tp.CheckpointManager(tp.Checkpoint(model=_model(1.0)), f"{bucket}/run", max_to_keep=2)
        saved = manager.save(options=tp.CheckpointOptions(enable_async=True))
        manager.sync()
        assert tp.load_variable(saved, KEY)[0, 0] == 1.0
        through_proxy = len(proxy.requests)
        assert through_proxy > 0 and any(p.endswith("/run/checkpoint") for _, p, _ in proxy.requests)
        written = tp.Checkpoint(model=_model(2.0)).write(f"{other}/ckpt-1")
        assert tp.load_variable(written, KEY)[0, 0] == 2.0
        assert len(proxy.requests) == through_proxy  # the other bucket's options: straight to the server
        restored = _model(0.0)
        tp.Checkpoint(model=restored).restore(f"{bucket}/run").assert_consumed()
        assert restored.w.numpy()[0, 0] == 1.0
    finally:
        tp.set_storage_options(f"{bucket}/run")
        tp.set_storage_options(other)
    # Without them, no credentials: a clear error, not a hang or a raw botocore exception.
    with pytest.raises(tp.errors.CheckpointError):
        tp.load_variable(saved, KEY)


def test_a_prefix_that_is_not_a_url_is_refused() -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="is not a URL"):
        tp.set_storage_options("/local/run", key="x")
