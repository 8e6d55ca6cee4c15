"""The tensors of the golden checkpoints, made deterministically with numpy only.

``make_golden.py`` (which needs TensorFlow) writes them with real TF; the tests (which do
not) rebuild them here and compare what they read from TF's files bit for bit.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

MANY_KEYS = 6000


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def dtype_tensors() -> dict[str, object]:
    """Every dtype TF checkpoints hold for variables, scalars, empty shapes and odd strings."""
    r = _rng(0)
    f = r.standard_normal((2, 3, 4))
    out: dict[str, object] = {
        "float16": f.astype(np.float16),
        "bfloat16": f.astype(ml_dtypes.bfloat16),
        "float32": f.astype(np.float32),
        "float64": f,
        "int8": r.integers(-128, 128, (5,), dtype=np.int8),
        "int16": r.integers(-(2**15), 2**15, (3, 2), dtype=np.int16),
        "int32": r.integers(-(2**31), 2**31, (7,), dtype=np.int32),
        "int64": r.integers(-(2**63), 2**63 - 1, (2, 2), dtype=np.int64),
        "uint8": r.integers(0, 256, (4, 1), dtype=np.uint8),
        "uint16": r.integers(0, 2**16, (3,), dtype=np.uint16),
        "uint32": r.integers(0, 2**32, (3,), dtype=np.uint32),
        "uint64": r.integers(0, 2**64 - 1, (3,), dtype=np.uint64),
        "bool": r.integers(0, 2, (2, 5)).astype(bool),
        "complex64": (f[0] + 1j * f[1]).astype(np.complex64),
        "complex128": f[0] + 1j * f[1],
        "scalar_float32": np.float32(3.25),
        "scalar_int64": np.int64(-9),
        "scalar_bool": np.bool_(True),
        "empty_float32": np.zeros((0,), np.float32),
        "empty_2d_int32": np.zeros((3, 0), np.int32),
        "rank5": r.standard_normal((1, 2, 1, 2, 3)).astype(np.float32),
        "special_floats": np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], np.float32),
        "string_scalar": b"hello",
        "string_empty_scalar": b"",
        "string_vector": np.array([b"", b"a", b"\xff\x00\xfe binary", "ünïcode".encode()], dtype=object),
        "string_long": np.array([b"x" * 70000, b"y" * 200], dtype=object),
        "string_2d": np.array([[b"a", b"bb"], [b"ccc", b""]], dtype=object),
        "string_empty_vector": np.zeros((0,), dtype=object),
    }
    return out


def many_tensors() -> dict[str, np.ndarray]:
    """Thousands of small keys: the index spans several data blocks."""
    return {
        f"layer_{i:05d}/some/long/variable/path/.ATTRIBUTES/VARIABLE_VALUE": np.array([i, -i], np.int32)
        for i in range(MANY_KEYS)
    }


def sharded_values() -> dict[str, np.ndarray]:
    """Variables of the checkpoint sharded by MaxShardSizePolicy (slices across shards)."""
    r = _rng(1)
    return {
        "big": r.standard_normal((10, 4)).astype(np.float32),
        "wide": r.standard_normal((3, 50)).astype(np.float32),
        "sc": np.float64(2.5),
        "small": np.arange(3, dtype=np.int64),
        # A scalar: TF 2.21's MaxShardSizePolicy loops without end (eating all memory) on a string
        # vector whose longest element exceeds max_shard_size, so the golden file avoids that.
        "text": b"alpha" * 30,
    }
