"""Incremental saves on an S3 server against full ones: the bytes the second save uploads, and its time.

    python benchmarks/incremental_s3.py            # 18 x 4 MiB, 5 rounds
    python benchmarks/incremental_s3.py --quick    # a smoke run

``benchmarks/incremental.py`` at small scale on moto's S3 server (in a process of its own, on
127.0.0.1): a ``tp.Checkpoint`` of 18 float32 variables of 4 MiB (random values) and a step
counter is saved once with ``Checkpoint.save`` at an ``s3://`` URL, then 2 variables are changed
whole and one in a single element, and it is saved again. Contenders:

  full         both saves plain (``CheckpointOptions()``)
  incremental  both saves ``CheckpointOptions(incremental=True)``: the unchanged data objects
               are copied by the server

Measured for the second save, through the logging proxy of the tests (``tests/storage/proxy.py``)
in front of the server: the bytes of every request body (what the client uploaded), the number
of requests, and the save's time. Each round runs each contender in a fresh process (interleaved,
the order alternating) against a new bucket; medians over rounds. The incremental save must
upload at most 20% of the full save's bytes (issue 44).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the tests' proxy

from incremental import saved_then_trained  # the same workload
from remote_compare import Server  # the same server

CONTENDERS = ("full", "incremental")


def _run_one(contender: str, count: int, size: int, endpoint: str) -> dict[str, float]:
    import fsspec.config
    import s3fs

    import trackpoint as tp
    from tests.storage.proxy import Proxy

    proxy = Proxy(endpoint)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", FSSPEC_S3_ENDPOINT_URL=proxy.endpoint)
    fsspec.config.set_conf_env(fsspec.config.conf)
    bucket = f"tp-bench-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench").mkdir(bucket)
    options = tp.CheckpointOptions(incremental=contender == "incremental")
    ckpt, train = saved_then_trained(f"s3://{bucket}/run/ckpt", count, size, options)
    train()
    proxy.sent.clear()
    start = time.perf_counter()
    ckpt.save(f"s3://{bucket}/run/ckpt", options=options)
    elapsed = time.perf_counter() - start
    sent = list(proxy.sent)
    proxy.close()
    return {"seconds": elapsed, "bytes": sum(length for _, _, length in sent), "requests": len(sent)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("CONTENDER", "ENDPOINT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    count, size = (6, 1 << 20) if args.quick else (18, 1 << 20)  # 4 MiB: an object each
    if args.one:
        print(json.dumps(_run_one(args.one[0], count, size, args.one[1])))
        return
    rounds = 1 if args.quick else args.rounds
    results: dict[str, dict[str, list[float]]] = {c: {"seconds": [], "bytes": [], "requests": []} for c in CONTENDERS}
    server = Server("process")
    try:
        for round_ in range(rounds):
            for contender in CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]:
                command = [sys.executable, __file__, "--one", contender, server.endpoint]
                out = subprocess.run(
                    command + (["--quick"] if args.quick else []), capture_output=True, text=True, check=False
                )
                if out.returncode:
                    raise RuntimeError(f"{contender} failed:\n{out.stderr[-4000:]}")
                for name, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
                    results[contender][name].append(value)
    finally:
        server.stop()
    full = {name: statistics.median(values) for name, values in results["full"].items()}
    inc = {name: statistics.median(values) for name, values in results["incremental"].items()}
    print(f"{count} x {size * 4 >> 20} MiB on moto's S3 server, 2 changed and 1 in one element; the second save,")
    print(f"medians of {rounds}:")
    print()
    print("| contender | uploaded (MiB) | requests | time (s) |")
    print("| --- | --- | --- | --- |")
    for name, row in (("full", full), ("incremental", inc)):
        print(f"| {name} | {row['bytes'] / 2**20:.2f} | {row['requests']:.0f} | {row['seconds']:.3f} |")
    print(
        f"| incremental / full | {inc['bytes'] / full['bytes']:.3f} | {inc['requests'] / full['requests']:.2f} "
        f"| {inc['seconds'] / full['seconds']:.3f} |"
    )


if __name__ == "__main__":
    main()
