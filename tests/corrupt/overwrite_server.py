"""Forks writers that overwrite one prefix forever, for test_overwrite_crash.py to SIGKILL.

    python overwrite_server.py PREFIX

Each line ``<step>`` on stdin forks a writer that writes PREFIX again and again from that
step on (every value holds the step; the shard count alternates between 400 and 1, so
overwrites both replace data files the old index names and switch shard counts). The
server prints the writer's PID, then its wait status once the test has killed it. Forking
from an imported server makes a kill cost milliseconds, not an interpreter start.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import trackpoint as tp

COUNT = 400
SIZE = 256  # float32 values: 1 KiB per variable, one variable per shard at 400 shards


def build(step: float) -> tuple[tp.Checkpoint, tp.Module]:
    model = tp.Module()
    model.vs = [tp.Variable(np.full(SIZE, step, np.float32)) for _ in range(COUNT)]
    return tp.Checkpoint(model=model), model


def options(step: int) -> tp.CheckpointOptions:
    shard_size = 1 << 30 if step % 3 == 0 else SIZE * 4
    return tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(shard_size))


def write_forever(prefix: str, step: int) -> None:
    ckpt, model = build(float(step))
    while True:
        for var in model.vs:
            var.assign(np.full(SIZE, float(step), np.float32))
        ckpt.write(prefix, options(step))
        step += 1


def main() -> None:
    prefix = sys.argv[1]
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                write_forever(prefix, int(line))
            finally:
                os._exit(1)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(status, flush=True)


if __name__ == "__main__":
    main()
