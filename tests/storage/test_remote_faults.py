"""Object-store failures through a forwarding proxy in front of moto's server: injected 500/503
answers and dropped connections are retried or end in a clear WriteError with nothing committed
and no multipart upload left open; writes serialised as S3 serialises them for the races."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np
import pytest

import trackpoint as tp

pytestmark = pytest.mark.slow  # uploads through the proxy with injected faults and retries: seconds each

KEY = "model/big/.ATTRIBUTES/VARIABLE_VALUE"


def _model(value: float, size: int = 2_000_000) -> tp.Module:
    m = tp.Module()
    m.big = tp.Variable(np.full(size, value))  # 16 MB by default: one PUT (multipart uploads: test_remote_multipart.py)
    return m


def _once_per_request(action: int | str, method: str = "PUT"):
    """A fault on the first attempt of each distinct request of ``method``, none on its retries."""
    seen: set[tuple[str, str]] = set()
    lock = threading.Lock()

    def fault(m: str, path: str, query: str) -> int | str | None:
        with lock:
            if m != method or (path, query) in seen:
                return None
            seen.add((path, query))
            return action

    return fault


def _leftovers(s3, bucket: str) -> tuple[list[str], list[dict]]:
    s3.invalidate_cache()
    objects = s3.find(bucket[5:])
    uploads = s3.call_s3("list_multipart_uploads", Bucket=bucket[5:]).get("Uploads", [])
    return objects, uploads


@pytest.mark.parametrize("action", [500, 503, "drop"], ids=["500", "503-slowdown", "dropped-connection"])
def test_transient_failures_of_every_upload_request_are_retried(bucket, s3, proxy, action) -> None:
    proxy.fault = _once_per_request(action)
    url = tp.Checkpoint(model=_model(2.5)).write(f"{bucket}/run/ckpt-1")
    proxy.fault = None
    assert tp.load_variable(url, KEY)[0] == 2.5
    puts = [r for r in proxy.requests if r[0] == "PUT"]
    assert len(puts) >= 2 * len({(p, q) for _, p, q in puts})  # every PUT failed once, then went through
    assert _leftovers(s3, bucket)[1] == []


def test_an_index_write_whose_answer_is_lost_is_recognised_as_ours(bucket, s3, proxy) -> None:
    """The index is stored but the connection drops before the answer; the retry finds an index
    in place. It is this writer's own, so the checkpoint is committed, not withdrawn."""
    dropped = []

    def fault(method: str, path: str, query: str) -> str | None:
        if method == "PUT" and path.endswith(".index") and not dropped:
            dropped.append(path)
            return "drop-after"
        return None

    proxy.fault = fault
    url = tp.Checkpoint(model=_model(4.0, size=1000)).write(f"{bucket}/run/ckpt-1")
    assert dropped
    assert tp.load_variable(url, KEY)[0] == 4.0


@pytest.mark.parametrize("target", ["data", "index"])
def test_a_persistent_failure_is_a_write_error_leaving_nothing(bucket, s3, proxy, target, monkeypatch) -> None:
    import fsspec.config

    # Fewer attempts than botocore's default, through the user's own knob, to keep the test short.
    monkeypatch.setitem(fsspec.config.conf["s3"], "config_kwargs", {"retries": {"max_attempts": 2}})

    def fault(method: str, path: str, query: str) -> int | None:
        if target == "data" and method == "PUT" and ".data-" in path:
            return 500
        if target == "index" and method == "PUT" and path.endswith(".index"):
            return 503
        return None

    proxy.fault = fault
    with pytest.raises(tp.errors.WriteError, match="ckpt-1"):
        tp.Checkpoint(model=_model(1.0)).write(f"{bucket}/run/ckpt-1")
    proxy.fault = None
    objects, uploads = _leftovers(s3, bucket)
    assert objects == [] and uploads == []


def _one_commits(prefix: str, writes: dict[float, Callable[[], str]]) -> tuple[float, tp.errors.WriteError]:
    """Run the writes of ``prefix`` at once; exactly one commits: its value, and the other's error."""
    outcomes: dict[float, object] = {}

    def run(value: float) -> None:
        try:
            outcomes[value] = writes[value]()
        except tp.errors.WriteError as exc:
            outcomes[value] = exc

    threads = [threading.Thread(target=run, args=(v,)) for v in writes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [v for v, outcome in outcomes.items() if outcome == prefix]
    assert len(winners) == 1, outcomes
    (loser,) = [o for o in outcomes.values() if o != prefix]
    assert isinstance(loser, tp.errors.WriteError), loser
    return winners[0], loser


def test_two_writers_racing_for_one_prefix_commit_exactly_one(bucket, s3, proxy) -> None:
    """Conditional writes one at a time, as S3 decides them (moto alone does not)."""
    proxy.serialise_writes = True
    for round_ in range(4):
        prefix = f"{bucket}/race/ckpt-{round_}"
        barrier = threading.Barrier(2, timeout=60)

        def write(value: float, prefix: str = prefix, barrier: threading.Barrier = barrier) -> str:
            ckpt = tp.Checkpoint(model=_model(value, size=200_000))
            barrier.wait()
            return ckpt.write(prefix)

        winner, _ = _one_commits(prefix, {v: functools.partial(write, v) for v in (1.0, 2.0)})
        assert tp.load_variable(prefix, KEY)[0] == winner
        tp.Checkpoint(model=_model(0.0, size=200_000)).read(prefix).assert_consumed()


def test_two_writers_past_the_listing_are_decided_by_the_conditional_index(bucket, s3, proxy, monkeypatch) -> None:
    """Both writers find the prefix empty, then upload data objects of different names (one
    file, and two): nothing but the index's ``If-None-Match`` tells them apart. One commits; the
    other raises and withdraws its data objects, so only the winner's bundle is left."""
    from trackpoint._storage import object_bundles

    proxy.serialise_writes = True
    prefix = f"{bucket}/race/ckpt-1"
    barrier = threading.Barrier(2, timeout=60)
    real_clear = object_bundles.clear_abandoned

    def listed_together(url: str) -> None:
        real_clear(url)
        barrier.wait()  # both past the check before either uploads

    monkeypatch.setattr(object_bundles, "clear_abandoned", listed_together)

    def write(value: float, shards: int) -> str:
        options = tp.CheckpointOptions()
        if shards > 1:
            options.experimental_sharding_callback = tp.sharding.MaxShardSizePolicy(1_000_000)
        ckpt = tp.Checkpoint(model=_model(value, size=200_000))  # 1.6 MB: two shards of at most 1 MB
        return ckpt.write(prefix, options)

    winner, loser = _one_commits(prefix, {1.0: lambda: write(1.0, 1), 2.0: lambda: write(2.0, 2)})
    assert "another writer" in str(loser), loser
    monkeypatch.undo()
    s3.invalidate_cache()
    names = sorted(p.rsplit("/", 1)[1] for p in s3.ls(f"{bucket[5:]}/race"))
    shards = 1 if winner == 1.0 else 2
    assert names == [*(f"ckpt-1.data-{i:05d}-of-{shards:05d}" for i in range(shards)), "ckpt-1.index"]
    restored = _model(0.0, size=200_000)
    tp.Checkpoint(model=restored).read(prefix).assert_consumed()
    assert restored.big.numpy()[0] == winner
