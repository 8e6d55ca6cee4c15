"""TensorFlow's checkpoint functions without TensorFlow, for code written against ``tf.train``.

:data:`tensorflow` is a module object with the names such code uses, each one trackpoint's own:
``train.load_checkpoint``, ``train.list_variables``, ``train.load_variable``,
``train.latest_checkpoint``, ``train.get_checkpoint_state``, ``train.Checkpoint``,
``train.CheckpointManager``, ``train.CheckpointOptions``, ``train.CheckpointView``;
``compat.v1.train.NewCheckpointReader``, ``compat.v1.train.list_variables`` and
``compat.v1.train.load_variable``; ``errors.OpError`` (``tp.errors.CheckpointError``, the base of
every error trackpoint raises) with ``NotFoundError``, ``DataLossError``,
``InvalidArgumentError``, ``PermissionDeniedError``, ``UnavailableError`` and
``DeadlineExceededError``; ``io.gfile.exists``, ``glob``, ``listdir``, ``isdir`` and ``GFile``; and
``__version__`` (the TensorFlow release whose behaviour trackpoint follows). Any other attribute
raises ``AttributeError`` naming what is covered, so a script that needs the real TensorFlow
fails at its first such line and says why.

:func:`as_tensorflow` makes ``import tensorflow`` (and ``import tensorflow.compat.v1 as tf``) give
it, so a script or a library runs unchanged; ``python -m trackpoint.compat SCRIPT [ARGS...]``
runs a script that way, as ``python -m cProfile`` does.

Examples:
    >>> import numpy as np, os, tempfile
    >>> import trackpoint as tp
    >>> from trackpoint.compat import as_tensorflow
    >>> prefix = tp.save_tensors(os.path.join(tempfile.mkdtemp(), "model.ckpt"), {"bert/w": np.ones(2)})
    >>> with as_tensorflow():
    ...     import tensorflow as tf
    ...     names = [name for name, _ in tf.train.list_variables(prefix)]
    ...     value = tf.train.load_variable(prefix, "bert/w")
    >>> names, value
    (['bert/w'], array([1., 1.]))
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from trackpoint.compat._tensorflow import MODULES, StandIn

__all__ = ["as_tensorflow", "tensorflow"]

#: The stand-in ``tensorflow`` module (see the module docstring).
tensorflow: StandIn = MODULES["tensorflow"]


@contextmanager
def as_tensorflow() -> Iterator[StandIn]:
    """Within the block, ``import tensorflow`` (and its submodules ``train``, ``compat.v1``,
    ``errors``, ``io.gfile``) gives :data:`tensorflow`; ``sys.modules`` is as it was afterwards,
    also after an exception. Blocks may nest.

    Raises:
        ImportError: The real TensorFlow is imported already: code in this process may hold its
            objects, and the stand-in cannot replace them. Run the script in a new process.

    Examples:
        >>> import sys
        >>> with as_tensorflow() as tf:
        ...     import tensorflow.compat.v1 as v1
        ...     v1.train.NewCheckpointReader is tf.compat.v1.train.NewCheckpointReader
        True
        >>> "tensorflow" in sys.modules
        False
    """
    present = sys.modules.get("tensorflow")
    if present is not None and not isinstance(present, StandIn):
        raise ImportError(
            "trackpoint.compat cannot stand in for TensorFlow: the real tensorflow is imported in this process "
            f"already (from {getattr(present, '__file__', None) or 'an unknown location'}); run the script in a "
            "new process, or use the real TensorFlow"
        )
    saved = {name: sys.modules[name] for name in MODULES if name in sys.modules}
    sys.modules.update(MODULES)
    try:
        yield tensorflow
    finally:
        for name in MODULES:
            if name in saved:
                sys.modules[name] = saved[name]
            else:
                sys.modules.pop(name, None)
