"""A `many` restore from an object store behind a link of limited bandwidth: does the restore overlap the download?

    python benchmarks/remote_slow_link.py                    # 1 MiB every 10 ms: about 100 MB/s
    python benchmarks/remote_slow_link.py --pause 0 --rounds 9

On the loopback, moto's GET of 20 MiB costs the client about as much CPU as it takes time, so a
restore cannot hide it (see ``remote_floor.py``). A real link is slower than the client's CPU:
this puts the test proxy (``tests/storage/proxy.py``, in a process of its own) between the client
and moto (in another), sending each whole-object answer ``--piece`` bytes every ``--pause``
seconds. Ranged answers pass at once. Each round, with the model built beforehand so that
nothing changes the objects' structure between the restores:

  get               s3fs ``get_file`` of one object of the same 20 MiB
  first restore     ``tp.Checkpoint(model).read(url)`` into a model of zeros not restored before
  repeated restore  the same into the objects restored the round before (an evaluator's restore)

Medians in seconds, and each restore's ratio to the get.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote_compare import Server, build  # the same server and model

import trackpoint as tp

_PROXY = """
import sys, time
sys.path.insert(0, {root!r})
from tests.storage.proxy import Proxy
proxy = Proxy({upstream!r})
proxy.trickle, proxy.trickle_suffix = ({piece}, {pause}), ""
print(proxy.endpoint, flush=True)
time.sleep(24 * 3600)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--piece", type=int, default=1 << 20, help="bytes sent at once")
    parser.add_argument("--pause", type=float, default=0.01, help="seconds between pieces")
    args = parser.parse_args()
    server = Server("process")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = _PROXY.format(root=root, upstream=server.endpoint, piece=args.piece, pause=args.pause)
    proxy = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        endpoint = (proxy.stdout.readline() if proxy.stdout else "").strip()
        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", FSSPEC_S3_ENDPOINT_URL=endpoint)
        import fsspec.config
        import s3fs

        fsspec.config.set_conf_env(fsspec.config.conf)
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench")
        fs.mkdir("tp-slow")
        model = build("many", quick=False)
        ckpt = tp.Checkpoint(model=model)
        url = ckpt.write("s3://tp-slow/run/ckpt")
        fs.pipe_file("tp-slow/blob", b"".join(v.numpy().tobytes() for v in model.vars))
        ckpt.read(url).assert_consumed()  # the record the repeated restores repeat
        fresh = [tp.Checkpoint(model=build("many", quick=False, fresh=True)) for _ in range(args.rounds)]
        local = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tp-slow-{os.getpid()}")
        times: dict[str, list[float]] = {"get": [], "first restore": [], "repeated restore": []}
        for first in fresh:
            steps = {
                "get": lambda: fs.get_file("tp-slow/blob", local),
                "first restore": lambda c=first: c.read(url).assert_consumed(),
                "repeated restore": lambda: ckpt.read(url).assert_consumed(),
            }
            for name, action in steps.items():
                start = time.perf_counter()
                action()
                times[name].append(time.perf_counter() - start)
        os.remove(local)
        med = {name: statistics.median(values) for name, values in times.items()}
        rate = args.piece / args.pause / 1e6 if args.pause else float("inf")
        print(f"\nmany (20 MiB, 20,000 variables), {rate:.0f} MB/s link, {args.rounds} rounds, medians:\n")
        print("| | seconds | / get |")
        print("|---|---|---|")
        for name, value in med.items():
            print(f"| {name} | {value:.3f} | {value / med['get']:.2f}x |")
    finally:
        proxy.kill()
        proxy.wait()
        server.stop()


if __name__ == "__main__":
    main()
