"""Repeated restores from S3: the whole download run by the download process against run by a thread.

    python benchmarks/remote_downloads.py              # 15 rounds
    python benchmarks/remote_downloads.py --quick      # a smoke run

moto's S3 server runs in a process of its own on 127.0.0.1. The `many` workload of
``remote_compare.py`` (20,000 variables of 1 KiB) is saved under eight prefixes, then restored
into the same objects again and again (an evaluator reading each new checkpoint), each round
once with the download process (:mod:`trackpoint._storage.download_process`) and once with it
switched off (a thread of this process downloads), the order alternating, each after
``os.sync()``; then one s3fs ``get_file`` of an object of the same bytes. Medians in seconds,
and each contender's ratio to the get.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import remote_compare

import trackpoint as tp
from trackpoint._storage import download_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    server = remote_compare.Server("process")
    try:
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", FSSPEC_S3_ENDPOINT_URL=server.endpoint
        )
        import fsspec.config
        import s3fs

        fsspec.config.set_conf_env(fsspec.config.conf)
        fs = s3fs.S3FileSystem(endpoint_url=server.endpoint, key="bench", secret="bench")
        bucket = f"tp-{uuid.uuid4().hex[:12]}"
        fs.mkdir(bucket)
        model = remote_compare.build("many", args.quick)
        ckpt = tp.Checkpoint(model=model)
        work = tempfile.mkdtemp(prefix="tp-downloads-bench-")
        blob = os.path.join(work, "blob")
        with open(blob, "wb") as f:
            f.writelines(v.numpy().tobytes() for v in model.vars)
        fs.put_file(blob, f"{bucket}/blob")
        names = [ckpt.write(f"s3://{bucket}/{uuid.uuid4().hex[:8]}/ckpt") for _ in range(8)]
        if download_process.started(60.0) is None:
            raise SystemExit("the download process did not start")
        ckpt.read(names[0]).assert_consumed()
        times: dict[str, list[float]] = {"download process": [], "thread": [], "s3fs get": []}
        for round_ in range(rounds):
            order = ("download process", "thread") if round_ % 2 == 0 else ("thread", "download process")
            for position, contender in enumerate(order):
                download_process.ENABLED = contender == "download process"
                os.sync()
                start = time.perf_counter()
                ckpt.read(names[(2 * round_ + position) % len(names)]).assert_consumed()
                times[contender].append(time.perf_counter() - start)
            download_process.ENABLED = True
            os.sync()
            start = time.perf_counter()
            fs.get_file(f"{bucket}/blob", os.path.join(work, "got"))
            times["s3fs get"].append(time.perf_counter() - start)
        get = statistics.median(times["s3fs get"])
        print(f"\nrepeated restores of {len(model.vars):,} variables, {rounds} rounds, medians:\n")
        print("| | seconds | ratio to the get | range |")
        print("|---|---|---|---|")
        for contender, values in times.items():
            median = statistics.median(values)
            print(f"| {contender} | {median:.3f} | {median / get:.2f}x | {min(values):.3f}-{max(values):.3f} |")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
