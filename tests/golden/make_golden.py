"""Write the golden checkpoints with real TensorFlow 2.21 (run from the repository root).

    python tests/golden/make_golden.py

Outputs under ``tests/golden/``:
  dtypes/plain        SaveV2 of every dtype (values.dtype_tensors, in that order)
  many/plain          SaveV2 of 6,000 keys (values.many_tensors): a multi-block index
  sharded/ckpt        tf.train.Checkpoint.write with MaxShardSizePolicy(64 bytes): slices over 4+ shards
  manager/ckpt-N      tf.train.CheckpointManager(max_to_keep=2), three saves: the 'checkpoint' state file
and ``examples/tf_model/ckpt-1``, the small object-based checkpoint the README inspects.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import values


def _fresh(path: pathlib.Path) -> pathlib.Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _tf_tensor(value: object) -> tf.Tensor:
    if isinstance(value, bytes):
        return tf.constant(value)
    array = np.asarray(value)
    if array.dtype == object:
        return tf.constant(array.tolist() if array.size else [], dtype=tf.string, shape=array.shape)
    return tf.constant(array)


def save_v2(prefix: pathlib.Path, tensors: dict[str, object]) -> None:
    names = list(tensors)
    tf.raw_ops.SaveV2(
        prefix=str(prefix),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[_tf_tensor(tensors[n]) for n in names],
    )


def main() -> None:
    save_v2(_fresh(HERE / "dtypes") / "plain", values.dtype_tensors())
    save_v2(_fresh(HERE / "many") / "plain", values.many_tensors())

    sharded = values.sharded_values()
    ckpt = tf.train.Checkpoint(**{k: tf.Variable(v) for k, v in sharded.items()})
    options = tf.train.CheckpointOptions(
        experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(max_shard_size=64)
    )
    ckpt.write(str(_fresh(HERE / "sharded") / "ckpt"), options=options)

    manager_dir = _fresh(HERE / "manager")
    step = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(manager_dir), max_to_keep=2)
    for _ in range(3):
        step.assign_add(1)
        manager.save()

    class Dense(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.kernel = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="kernel")
            self.bias = tf.Variable(np.zeros(3, np.float32), name="bias")

    model = tf.Module()
    model.dense = Dense()
    model.layers = [tf.Variable(np.int32(1)), tf.Variable(np.ones(4, np.float64))]
    example = tf.train.Checkpoint(model=model, note=tf.Variable(b"trained with TF 2.21"))
    example.save(str(_fresh(HERE.parent.parent / "examples" / "tf_model") / "ckpt"))


if __name__ == "__main__":
    main()
