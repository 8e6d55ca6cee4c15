"""The floor under a `many` restore from an object store: can the download hide behind the restore's CPU?

    python benchmarks/remote_floor.py              # about half a minute
    python benchmarks/remote_floor.py --rounds 15

Issue 20 asks a restore of `many` (20,000 variables of 1 KiB) from moto's S3 server to cost at
most 2x an s3fs ``get`` of one object of the same 20 MiB. That needs the download to overlap
the restore's own CPU work, which this measures, with moto in a process of its own (so the
server's Python does not share this process's GIL). Each round, in a rotated order, after
``os.sync()``:

  get              s3fs ``cat_file`` of the 20 MiB object into memory, as trackpoint downloads a
                   data object; the wall time and this process's CPU time (``getrusage``) over it
  local restore    ``tp.Checkpoint(model).read(local prefix)`` of the same variables
  both, serial     the two, one after the other
  both, overlapped the get on a helper thread while this thread restores from local disk: the
                   best a pipeline could do (every byte is already where the restore wants it)

Medians in seconds. If the get's CPU time is most of its wall time, it cannot overlap work that
holds the GIL: "overlapped" is then no faster than "serial".
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from remote_compare import Server, build  # the same server and model

import trackpoint as tp


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    server = Server("process")
    try:
        import s3fs

        fs = s3fs.S3FileSystem(endpoint_url=server.endpoint, key="bench", secret="bench")
        fs.mkdir("tp-floor")
        model = build("many", quick=False)
        ckpt = tp.Checkpoint(model=model)
        prefix = ckpt.write(os.path.join(tempfile.mkdtemp(prefix="tp-floor-"), "ckpt"))
        fs.pipe_file("tp-floor/blob", b"".join(v.numpy().tobytes() for v in model.vars))

        def get() -> None:
            fs.cat_file("tp-floor/blob")

        def restore() -> None:
            ckpt.read(prefix).assert_consumed()

        def serial() -> None:
            get()
            restore()

        def overlapped() -> None:
            helper = threading.Thread(target=get)
            helper.start()
            restore()
            helper.join()

        steps = {"get": get, "local restore": restore, "both, serial": serial, "both, overlapped": overlapped}
        wall: dict[str, list[float]] = {name: [] for name in steps}
        cpu: list[float] = []
        for action in steps.values():
            action()  # warm: imports, connections, the restore record
        names = list(steps)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                os.sync()
                start, start_cpu = time.perf_counter(), _cpu()
                steps[name]()
                wall[name].append(time.perf_counter() - start)
                if name == "get":
                    cpu.append(_cpu() - start_cpu)
        print(f"\nmany (20 MiB, 20,000 variables), moto in its own process, {args.rounds} rounds, medians:\n")
        print("| | wall (s) | client CPU (s) |")
        print("|---|---|---|")
        for name in names:
            extra = f"{statistics.median(cpu):.3f}" if name == "get" else ""
            print(f"| {name} | {statistics.median(wall[name]):.3f} | {extra} |")
        print(f"\n2x the get: {2 * statistics.median(wall['get']):.3f} s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
