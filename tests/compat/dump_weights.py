"""A script written for TensorFlow, as people write them to get weights out of a TF1 checkpoint;
the tests run it unchanged, with the real TensorFlow and with ``python -m trackpoint.compat``.

    python dump_weights.py CHECKPOINT_DIR OUT.npz
"""

import sys

import numpy as np
import tensorflow as tf


def main(directory, out):
    assert tf.io.gfile.isdir(directory) and tf.io.gfile.exists(directory)
    path = tf.train.latest_checkpoint(directory)
    names = [name for name, _ in tf.train.list_variables(path)]
    arrays = {}
    for name, shape in tf.train.list_variables(path):
        value = tf.train.load_variable(path, name)
        assert list(np.shape(value)) == shape, (name, shape)
        arrays[name.replace("/", "__")] = value
    reader = tf.compat.v1.train.NewCheckpointReader(path)
    shapes = reader.get_variable_to_shape_map()
    assert sorted(shapes) == names, (sorted(shapes), names)
    assert sorted(tf.io.gfile.listdir(directory)) == sorted(
        name.rsplit("/", 1)[-1] for name in tf.io.gfile.glob(directory + "/*")
    )
    with tf.io.gfile.GFile(directory + "/checkpoint") as f:
        state = f.read()
    try:
        tf.train.load_variable(directory + "/no-such-checkpoint", "x")
        missing = "loaded"
    except tf.errors.NotFoundError:
        missing = "NotFoundError"
    except tf.errors.OpError as exc:
        missing = type(exc).__name__
    np.savez(out, __names=np.array(names), __state=np.array(state), __missing=np.array(missing), **arrays)
    print(f"{len(names)} variables from {path.rsplit('/', 1)[-1]}, TensorFlow {tf.__version__[:4]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
