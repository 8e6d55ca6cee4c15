"""Hypothesis strategies for tensors of every checkpoint dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

NUMERIC = [
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
    np.complex64,
    np.complex128,
]

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


@st.composite
def tensors(draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(["numeric", "bfloat16", "string", "bytes"]))
    if kind == "numeric":
        return draw(hnp.arrays(draw(st.sampled_from(NUMERIC)), shapes))
    if kind == "bfloat16":
        return draw(hnp.arrays(np.float32, shapes)).astype(ml_dtypes.bfloat16)
    if kind == "bytes":
        return draw(st.binary(max_size=50))
    shape = draw(shapes)
    flat = draw(st.lists(st.binary(max_size=30), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    array = np.empty(len(flat), dtype=object)
    array[:] = flat
    return array.reshape(shape)


tensor_dicts = st.dictionaries(st.text(min_size=1, max_size=20), tensors(), min_size=1, max_size=8)
