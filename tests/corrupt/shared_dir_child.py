"""Overwrites its own prefix in a shared directory N times, for test_shared_directory.py.

    python shared_dir_child.py DIRECTORY NAME COUNT

Each write has 50 shards, so its temporaries sit in the directory for a while, where the
other writer's cleanup sees them. Prints "ok" when every write succeeded.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import trackpoint as tp


def main() -> None:
    directory, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = tp.Module()
    model.vs = [tp.Variable(np.zeros(4096, np.float32)) for _ in range(50)]
    ckpt = tp.Checkpoint(model=model)
    options = tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(4096 * 4))
    for step in range(count):
        for var in model.vs:
            var.assign(np.full(4096, step, np.float32))
        ckpt.write(os.path.join(directory, name), options)
    print("ok", os.getpid(), flush=True)


if __name__ == "__main__":
    main()
