"""TensorFlow ``DataType`` enum values and their numpy counterparts."""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = [
    "DTYPES",
    "FLOAT_NAMES",
    "INT_NAMES",
    "ITEMSIZE_BY_ENUM",
    "NUMPY_BY_ENUM",
    "READABLE_BY_ENUM",
    "STRING",
    "DType",
    "family",
    "from_enum",
    "from_numpy",
]


@dataclass(frozen=True)
class DType:
    """One checkpointable dtype.

    Attributes:
        enum: The ``DataType`` value stored in ``BundleEntryProto.dtype``.
        name: TensorFlow's name, e.g. ``"float32"`` (``tf.DType.name``).
        numpy: The numpy dtype (little-endian); ``object`` for strings.
    """

    enum: int
    name: str
    numpy: np.dtype
    #: Plain fields rather than properties: restores read them once per tensor.
    is_string: bool = field(init=False)
    itemsize: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_string", self.enum == 7)
        object.__setattr__(self, "itemsize", self.numpy.itemsize)

    @property
    def enum_name(self) -> str:
        """The ``DT_*`` spelling used by ``debug_string``, e.g. ``"DT_FLOAT"``."""
        return _ENUM_NAMES[self.enum]


_TABLE = [
    (1, "float32", "DT_FLOAT", np.dtype("<f4")),
    (2, "float64", "DT_DOUBLE", np.dtype("<f8")),
    (3, "int32", "DT_INT32", np.dtype("<i4")),
    (4, "uint8", "DT_UINT8", np.dtype("u1")),
    (5, "int16", "DT_INT16", np.dtype("<i2")),
    (6, "int8", "DT_INT8", np.dtype("i1")),
    (7, "string", "DT_STRING", np.dtype(object)),
    (8, "complex64", "DT_COMPLEX64", np.dtype("<c8")),
    (9, "int64", "DT_INT64", np.dtype("<i8")),
    (10, "bool", "DT_BOOL", np.dtype(bool)),
    (14, "bfloat16", "DT_BFLOAT16", np.dtype(ml_dtypes.bfloat16)),
    (17, "uint16", "DT_UINT16", np.dtype("<u2")),
    (18, "complex128", "DT_COMPLEX128", np.dtype("<c16")),
    (19, "float16", "DT_HALF", np.dtype("<f2")),
    (22, "uint32", "DT_UINT32", np.dtype("<u4")),
    (23, "uint64", "DT_UINT64", np.dtype("<u8")),
    (24, "float8_e5m2", "DT_FLOAT8_E5M2", np.dtype(ml_dtypes.float8_e5m2)),
    (25, "float8_e4m3fn", "DT_FLOAT8_E4M3FN", np.dtype(ml_dtypes.float8_e4m3fn)),
    (26, "float8_e4m3fnuz", "DT_FLOAT8_E4M3FNUZ", np.dtype(ml_dtypes.float8_e4m3fnuz)),
    (27, "float8_e4m3b11fnuz", "DT_FLOAT8_E4M3B11FNUZ", np.dtype(ml_dtypes.float8_e4m3b11fnuz)),
    (28, "float8_e5m2fnuz", "DT_FLOAT8_E5M2FNUZ", np.dtype(ml_dtypes.float8_e5m2fnuz)),
]

# Names of types we recognise but cannot turn into numpy arrays, for error messages.
_ENUM_NAMES = {
    0: "DT_INVALID",
    11: "DT_QINT8",
    12: "DT_QUINT8",
    13: "DT_QINT32",
    15: "DT_QINT16",
    16: "DT_QUINT16",
    20: "DT_RESOURCE",
    21: "DT_VARIANT",
    29: "DT_INT4",
    30: "DT_UINT4",
    31: "DT_INT2",
    32: "DT_UINT2",
    33: "DT_FLOAT4_E2M1FN",
}
_ENUM_NAMES.update({enum: dt_name for enum, _, dt_name, _ in _TABLE})

DTYPES: dict[int, DType] = {enum: DType(enum, name, np_dtype) for enum, name, _, np_dtype in _TABLE}
STRING = DTYPES[7]
_BY_NUMPY: dict[np.dtype, DType] = {}
for _dt in DTYPES.values():
    if not _dt.is_string:
        _BY_NUMPY[_dt.numpy] = _dt
        _BY_NUMPY[_dt.numpy.newbyteorder(">")] = _dt

# Indexed by DataType value, for lookups over a whole column of them (index entries decoded
# at once): whether trackpoint reads the type, its element size (0 for strings and types not
# read), its numpy dtype (None for strings and types not read). Clip a column into
# range before indexing, and mask what the clip moved.
READABLE_BY_ENUM = np.zeros(max(DTYPES) + 1, bool)
ITEMSIZE_BY_ENUM = np.zeros(max(DTYPES) + 1, np.int64)
NUMPY_BY_ENUM = np.full(max(DTYPES) + 1, None, object)
for _enum, _dt in DTYPES.items():
    READABLE_BY_ENUM[_enum] = True
    if not _dt.is_string:
        ITEMSIZE_BY_ENUM[_enum] = _dt.numpy.itemsize
        NUMPY_BY_ENUM[_enum] = _dt.numpy


def enum_name(enum: int) -> str:
    """``DT_*`` name of any DataType value, including ones we cannot read."""
    if enum >= 100 and enum - 100 in _ENUM_NAMES:
        return _ENUM_NAMES[enum - 100] + "_REF"
    return _ENUM_NAMES.get(enum, f"DT_UNKNOWN({enum})")


def from_enum(enum: int) -> DType | None:
    """The :class:`DType` for a ``DataType`` value, or None if it is not readable here."""
    return DTYPES.get(enum)


# The dtypes of each family a cast (``tp.rewrite``, ``tp.average``) may change: floating point and integer.
FLOAT_NAMES = frozenset(
    {"float16", "float32", "float64", "bfloat16"} | {d.name for d in DTYPES.values() if d.name.startswith("float8")}
)
INT_NAMES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


def family(dtype: DType) -> str:
    """``"float"``, ``"int"`` or ``"other"`` (bool, complex, string).

    Examples:
        >>> family(DTYPES[14]), family(DTYPES[9]), family(DTYPES[10])  # bfloat16, int64, bool
        ('float', 'int', 'other')
    """
    if dtype.name in FLOAT_NAMES:
        return "float"
    return "int" if dtype.name in INT_NAMES else "other"


def from_numpy(dtype: np.dtype) -> DType | None:
    """The :class:`DType` for a numpy dtype; object and bytes/str dtypes map to string."""
    if dtype.kind in "OSU":
        return STRING
    return _BY_NUMPY.get(dtype)
