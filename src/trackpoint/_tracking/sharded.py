"""``ShardedVariable``: the part of a larger tensor that one process holds.

A job split over several processes keeps each large tensor in pieces (rows or blocks, as
FSDP does): each process holds one piece and knows where it lies in the whole. Saved, the
piece is one TF slice of the tensor (the index lists every process's slice); restored, a
process reads only the stored slices that overlap its piece, whatever the number and
shape of the pieces that were saved. A checkpoint saved this way reads in one process, and
in TensorFlow, as whole tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from trackpoint._format.slices import Extents, SlicedValue
from trackpoint._tracking.protocol import VARIABLE_VALUE
from trackpoint._tracking.variables import Variable
from trackpoint.errors import InvalidArgumentError

__all__ = ["ShardedVariable"]


class ShardedVariable(Variable):
    """A variable holding the block of a ``full_shape`` tensor that starts at ``offsets``.

    It behaves as a :class:`tp.Variable` of its block's shape. A save stores the block as a
    slice of the whole tensor, so every process of a job saves its own block into one
    checkpoint (see :mod:`trackpoint.distributed`); a restore reads the block back from
    whatever was saved: slices of another layout, or the whole tensor.

    Args:
        initial_value: The block's value.
        full_shape: The whole tensor's shape.
        offsets: Where the block starts in each dimension.
        dtype: As for :class:`tp.Variable`.
        name: As for :class:`tp.Variable`.
        trainable: As for :class:`tp.Variable`.

    Raises:
        InvalidArgumentError: The block does not lie inside ``full_shape``.

    Examples:
        >>> import numpy as np, tempfile, trackpoint as tp
        >>> from trackpoint.distributed import ShardedVariable
        >>> top = ShardedVariable(np.zeros((2, 3)), full_shape=(4, 3), offsets=(0, 0))
        >>> top.shape, top.full_shape, top.offsets
        ((2, 3), (4, 3), (0, 0))
        >>> path = tp.Checkpoint(w=tp.Variable(np.arange(12.0).reshape(4, 3))).write(tempfile.mkdtemp() + "/c")
        >>> _ = tp.Checkpoint(w=top).read(path)  # only rows 0-1 of the saved tensor
        >>> top.numpy()
        array([[0., 1., 2.],
               [3., 4., 5.]])
    """

    def __init__(
        self,
        initial_value: Any,
        full_shape: Sequence[int],
        offsets: Sequence[int],
        dtype: Any = None,
        name: str | None = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(initial_value, dtype=dtype, name=name, trainable=trainable)
        full = tuple(int(d) for d in full_shape)
        starts = tuple(int(o) for o in offsets)
        shape = self.shape
        if len(full) != len(shape) or len(starts) != len(shape):
            raise InvalidArgumentError(
                f"sharded variable {self._name!r}: a block of shape {shape} needs a full shape and offsets of "
                f"{len(shape)} dimensions, got {list(full)} and {list(starts)}"
            )
        if not shape:
            raise InvalidArgumentError(f"sharded variable {self._name!r}: a scalar cannot be sharded; use tp.Variable")
        for dim, (start, size, whole) in enumerate(zip(starts, shape, full)):
            if start < 0 or start + size > whole:
                raise InvalidArgumentError(
                    f"sharded variable {self._name!r}: its block {list(shape)} at offsets {list(starts)} does not "
                    f"lie inside the full shape {list(full)} (dimension {dim})"
                )
        self._full_shape = full
        self._offsets = starts

    @property
    def full_shape(self) -> tuple[int, ...]:
        """The whole tensor's shape."""
        return self._full_shape

    @property
    def offsets(self) -> tuple[int, ...]:
        """Where this block starts in the whole tensor."""
        return self._offsets

    @property
    def extents(self) -> Extents:
        """The block as ``(start, length)`` per dimension."""
        return tuple(zip(self._offsets, self.shape))

    @property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """The block as ``(start, stop)`` per dimension."""
        return tuple((start, start + size) for start, size in zip(self._offsets, self.shape))

    #: Its block is never written in place, as a tp.Variable's array is not.
    _tp_copy_on_write: ClassVar[bool] = True

    def _serialize_to_tensors(self) -> dict[str, Any]:
        return {VARIABLE_VALUE: self._tp_variable_value()}

    def _tp_variable_value(self) -> SlicedValue:
        # One slice of the whole tensor: every process of a job saves its own block.
        return SlicedValue(self._value, self._full_shape, self.extents)

    def _tp_region(self) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        """The whole tensor's shape and the part of it a restore reads (``protocol.Region``)."""
        return self._full_shape, self.bounds

    def __repr__(self) -> str:
        return (
            f"<tp.distributed.ShardedVariable {self._name!r} shape={self.shape} of {self._full_shape} at "
            f"{self._offsets} dtype={self.dtype}>"
        )
