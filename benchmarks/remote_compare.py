"""Checkpoints on an S3 server (moto's, on 127.0.0.1) against s3fs ``put``/``get`` of the same bytes.

    python benchmarks/remote_compare.py                  # large and many, 3 rounds
    python benchmarks/remote_compare.py --quick          # a smoke run
    python benchmarks/remote_compare.py --server process # moto in a process of its own

Workloads (the issue's):
  large  16 variables of 64 MiB (1 GiB)
  many   20,000 variables of 1 KiB (20 MiB)

Contenders, in one process against one server, interleaved round by round (the order rotated),
each write to a fresh prefix after ``os.sync()``:
  trackpoint save     ``tp.Checkpoint(...).write("s3://...")``: the bundle is staged in the local
                      temporary directory, then uploaded, the index last and only if absent
  s3fs put            ``fs.put_file`` of one local file holding the same number of bytes (one object)
  trackpoint restore  ``tp.Checkpoint(...).read("s3://...")`` into the existing variables
  fresh restore       the same into a model of zeros built for it, as a resumed job restores
  s3fs get            ``fs.get_file`` of that object into a local file
  local save/restore  the same write and read on the local disk: what the object store adds
  one tensor          ``tp.load_variable`` of one variable against s3fs ``cat_file`` of its bytes

Medians in seconds (and of system time), trackpoint's ratio to s3fs, and peak resident memory
beyond the process's before each call (with ``--server thread`` moto's copies of the objects
count in it too: use ``--server process`` for trackpoint's own). moto keeps objects in memory and serves
them over HTTP on the loopback, so the numbers say how the protocols compare, not what a real
bucket gives.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

import numpy as np

import trackpoint as tp

MiB = 1 << 20


def build(workload: str, quick: bool, fresh: bool = False) -> tp.Module:
    """The model; ``fresh``: zeros of the same shapes, as a resumed job builds it before its restore."""
    rng = np.random.default_rng(0)
    m = tp.Module()
    if workload == "large":
        count, size = (16, (64 * MiB // 8) // (16 if quick else 1))
    else:
        count, size = (2_000 if quick else 20_000, 1024 // 8)
    m.vars = [tp.Variable(np.zeros(size) if fresh else rng.standard_normal(size)) for _ in range(count)]
    return m


class Server:
    """moto's S3 server on 127.0.0.1, in a thread of this process or in a process of its own."""

    def __init__(self, kind: str) -> None:
        if kind == "thread":
            from moto.server import ThreadedMotoServer

            self._threaded = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._threaded.start()
            host, port = self._threaded.get_host_and_port()
            self._process: subprocess.Popen[bytes] | None = None
        else:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                host, port = probe.getsockname()
            command = [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)]
            self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while True:
                try:
                    with socket.create_connection((host, port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline or self._process.poll() is not None:
                        raise RuntimeError("moto's server did not start") from None
                    time.sleep(0.1)
        self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        else:
            self._threaded.stop()


def _memory(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def _timed(
    key: str,
    action: Callable[[], object],
    times: dict[str, list[float]],
    system: dict[str, list[float]],
    peak: dict[str, list[int]],
) -> None:
    """Run ``action`` after ``os.sync()``; note its wall and system seconds and its peak resident
    memory beyond what the process held before (Linux: ``clear_refs`` resets the peak)."""
    os.sync()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    resident = _memory("VmRSS:")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    start = time.perf_counter()
    action()
    times[key].append(time.perf_counter() - start)
    system[key].append(resource.getrusage(resource.RUSAGE_SELF).ru_stime - before)
    peak[key].append(_memory("VmHWM:") - resident)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", choices=("large", "many"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--server",
        choices=("thread", "process"),
        default="thread",
        help="moto's server in this process (its threads share the GIL with the client) or in its own",
    )
    args = parser.parse_args()
    server = Server(args.server)
    endpoint = server.endpoint
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", FSSPEC_S3_ENDPOINT_URL=endpoint)
    import fsspec.config
    import s3fs

    fsspec.config.set_conf_env(fsspec.config.conf)
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench")
    bucket = "tp-bench"
    fs.mkdir(bucket)
    work = tempfile.mkdtemp(prefix="tp-remote-bench-")
    try:
        for workload in args.workload or ["large", "many"]:
            model = build(workload, args.quick)
            ckpt = tp.Checkpoint(model=model)
            nbytes = sum(v.numpy().nbytes for v in model.vars)
            blob = os.path.join(work, "blob")
            with open(blob, "wb") as f:
                f.writelines(v.numpy().tobytes() for v in model.vars)
            keys = ("save", "put", "local save", "restore", "fresh restore", "get", "local restore", "one tensor")
            times: dict[str, list[float]] = {k: [] for k in (*keys, "cat range")}
            system: dict[str, list[float]] = {k: [] for k in times}
            peak: dict[str, list[int]] = {k: [] for k in times}
            one = model.vars[len(model.vars) // 2].numpy()
            tensor_key = f"model/vars/{len(model.vars) // 2}/.ATTRIBUTES/VARIABLE_VALUE"
            for round_ in range(args.rounds):
                name = uuid.uuid4().hex[:8]
                steps = [
                    ("save", lambda n=name, c=ckpt: c.write(f"s3://{bucket}/{n}/ckpt")),
                    ("put", lambda n=name, b=blob: fs.put_file(b, f"{bucket}/{n}/blob")),
                    ("local save", lambda n=name, c=ckpt: c.write(os.path.join(work, n, "ckpt"))),
                ]
                for key, action in steps if round_ % 2 == 0 else steps[::-1]:
                    _timed(key, action, times, system, peak)
                fresh = tp.Checkpoint(model=build(workload, args.quick, fresh=True))
                reads = [
                    ("restore", lambda n=name, c=ckpt: c.read(f"s3://{bucket}/{n}/ckpt").assert_consumed()),
                    ("fresh restore", lambda n=name, c=fresh: c.read(f"s3://{bucket}/{n}/ckpt").assert_consumed()),
                    ("get", lambda n=name: fs.get_file(f"{bucket}/{n}/blob", os.path.join(work, "got"))),
                    ("local restore", lambda n=name, c=ckpt: c.read(os.path.join(work, n, "ckpt")).assert_consumed()),
                    ("one tensor", lambda n=name, k=tensor_key: tp.load_variable(f"s3://{bucket}/{n}/ckpt", k)),
                    ("cat range", lambda n=name, o=one: fs.cat_file(f"{bucket}/{n}/blob", start=0, end=o.nbytes)),
                ]
                for key, action in reads if round_ % 2 == 0 else reads[::-1]:
                    _timed(key, action, times, system, peak)
                del fresh
                fs.rm(f"{bucket}/{name}", recursive=True)
                shutil.rmtree(os.path.join(work, name))
                print(workload, round_ + 1, {k: [round(t, 3) for t in v] for k, v in times.items()}, flush=True)
            med = {k: statistics.median(v) for k, v in times.items()}
            sys_med = {k: statistics.median(v) for k, v in system.items()}
            peak_med = {k: statistics.median(v) / MiB for k, v in peak.items()}
            print(f"\n{workload} ({nbytes / MiB:.0f} MiB), medians in seconds (system time in brackets):\n")
            print("| | trackpoint | s3fs (one object) | ratio | trackpoint on local disk | peak extra: tp / s3fs |")
            print("|---|---|---|---|---|---|")
            rows = (
                ("save / put", "save", "put", "local save"),
                ("restore / get", "restore", "get", "local restore"),
                ("restore into fresh variables / get", "fresh restore", "get", "local restore"),
            )
            for label, ours, theirs, local in rows:
                ratio = med[ours] / med[theirs]
                print(
                    f"| {label} | {med[ours]:.2f} [{sys_med[ours]:.2f}] | {med[theirs]:.2f} [{sys_med[theirs]:.2f}] "
                    f"| {ratio:.2f}x | {med[local]:.2f} | {peak_med[ours]:.0f} / {peak_med[theirs]:.0f} MiB |"
                )
            tensor, cat = med["one tensor"], med["cat range"]
            print(f"| one tensor / ranged cat | {tensor:.3f} | {cat:.3f} | {tensor / cat:.2f}x | |\n")
    finally:
        server.stop()
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
