"""Torch tensors as numpy arrays and back: dtypes, zero-copy host views, copies into existing memory.

Why views: a save writes the bytes of contiguous CPU tensors as they lie (no copy), and a
restore writes into a parameter's own storage. dtypes numpy lacks (bfloat16, float8) are
viewed through an integer of their width and reinterpreted as the ``ml_dtypes`` type the
core reads and writes, so they too are never converted. Tensors off the CPU (CUDA) are
copied to and from the host in chunks of :data:`DEVICE_CHUNK_BYTES`, so that the staging
memory a copy needs stays bounded whatever the tensor's size.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch

from trackpoint.errors import InvalidArgumentError

__all__ = [
    "DEVICE_CHUNK_BYTES",
    "as_array",
    "check_value",
    "copy_into",
    "describe",
    "destination",
    "dtype_name",
    "new_tensor",
    "numpy_dtype",
]

#: A tensor on another device is moved through host memory in pieces of at most this size.
DEVICE_CHUNK_BYTES = 64 << 20

# torch dtype -> (numpy dtype, the torch integer dtype of its width to view it through, or None)
_DTYPES: dict[torch.dtype, tuple[np.dtype, torch.dtype | None]] = {
    torch.float32: (np.dtype(np.float32), None),
    torch.float64: (np.dtype(np.float64), None),
    torch.float16: (np.dtype(np.float16), None),
    torch.bfloat16: (np.dtype(ml_dtypes.bfloat16), torch.int16),
    torch.int8: (np.dtype(np.int8), None),
    torch.int16: (np.dtype(np.int16), None),
    torch.int32: (np.dtype(np.int32), None),
    torch.int64: (np.dtype(np.int64), None),
    torch.uint8: (np.dtype(np.uint8), None),
    torch.bool: (np.dtype(np.bool_), None),
    torch.complex64: (np.dtype(np.complex64), None),
    torch.complex128: (np.dtype(np.complex128), None),
}
for _name, _ml in (
    ("uint16", None),
    ("uint32", None),
    ("uint64", None),
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn),
    ("float8_e5m2", ml_dtypes.float8_e5m2),
    ("float8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz),
    ("float8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz),
):
    _torch_dtype = getattr(torch, _name, None)  # newer torch releases add these
    if _torch_dtype is not None:
        _DTYPES[_torch_dtype] = (np.dtype(_ml), torch.uint8) if _ml is not None else (np.dtype(_name), None)


def numpy_dtype(tensor: torch.Tensor, name: str) -> np.dtype:
    """The numpy dtype a tensor is saved as.

    Raises:
        InvalidArgumentError: TensorFlow has no dtype for it (quantized, complex32, ...).
    """
    found = _DTYPES.get(tensor.dtype)
    if found is None:
        raise InvalidArgumentError(
            f"{name}: torch dtype {tensor.dtype} has no TensorFlow checkpoint dtype; convert the tensor "
            "(for example .float()) before saving, or keep it out of the checkpoint"
        )
    return found[0]


def dtype_name(tensor: torch.Tensor) -> str:
    """``float32``: the name of the dtype it is saved as (torch's name for one TF lacks)."""
    found = _DTYPES.get(tensor.dtype)
    return found[0].name if found is not None else str(tensor.dtype)


def describe(tensor: torch.Tensor) -> str:
    """``float32[3, 4]``, as the core names a value's dtype and shape."""
    return f"{dtype_name(tensor)}{list(tensor.shape)}"


def _host_view(tensor: torch.Tensor) -> np.ndarray:
    """A numpy array over a CPU tensor's own memory (the tensor must be contiguous)."""
    dtype, through = _DTYPES[tensor.dtype]
    if through is None:
        return tensor.numpy()
    return tensor.view(through).numpy().view(dtype)


def as_array(tensor: torch.Tensor, name: str) -> np.ndarray:
    """The tensor's value as a numpy array to save: a view of its memory when it is a
    contiguous CPU tensor, else a contiguous host copy (copied in bounded chunks from a device).

    Raises:
        InvalidArgumentError: Its dtype has no TensorFlow equivalent, or it is on the meta
            device (it has no values).
    """
    found = _DTYPES.get(tensor.dtype)
    if found is None:
        numpy_dtype(tensor, name)  # raises, naming it
    tensor = tensor.detach()
    if found is not None and found[1] is None:
        # The usual tensor (CPU, dense, contiguous, no conjugate or negative bit) in one call,
        # which raises for every other kind: the checks below cost as much again.
        try:
            array = tensor.numpy()
        except (RuntimeError, TypeError):
            pass
        else:
            if array.flags.c_contiguous:
                return array
    if tensor.is_meta:
        raise InvalidArgumentError(
            f"{name} is on the meta device, which holds no values to save; materialize it first "
            "(module.to_empty(device=...), then initialize or load its values)"
        )
    if tensor.device.type != "cpu":
        return _host_view(_to_host(tensor))
    if tensor.layout is not torch.strided:
        raise InvalidArgumentError(
            f"{name}: a {tensor.layout} tensor cannot be checkpointed; convert it to dense first"
        )
    if not tensor.is_contiguous() or (tensor.is_complex() and (tensor.is_conj() or tensor.is_neg())):
        tensor = tensor.resolve_conj().resolve_neg().contiguous()
    return _host_view(tensor)


def _to_host(tensor: torch.Tensor) -> torch.Tensor:
    host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
    source, target = tensor.contiguous().reshape(-1), host.reshape(-1)
    step = max(1, DEVICE_CHUNK_BYTES // max(1, tensor.element_size()))
    for start in range(0, source.numel(), step):
        target[start : start + step].copy_(source[start : start + step])
    return host


def destination(tensor: torch.Tensor) -> np.ndarray | None:
    """A writable array over the tensor's memory for a restore to read into, or None when it
    has none to offer (another device, not contiguous, a conjugate or negative view)."""
    if (
        not tensor.is_cpu  # a fifth of the cost of device.type, asked of each of a restore's tensors
        or tensor.dtype not in _DTYPES
        or tensor.layout is not torch.strided
        or not tensor.is_contiguous()
        or (tensor.is_complex() and (tensor.is_conj() or tensor.is_neg()))
    ):
        return None
    return _host_view(tensor.detach())


def check_value(tensor: torch.Tensor, value: Any, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """A checkpoint value as the array to copy into ``tensor``: exactly its dtype and shape
    (``shape`` instead of the tensor's for one that has none yet: a lazy module's).

    Raises:
        InvalidArgumentError: The value is of another dtype or shape (no silent cast), or the
            tensor is on the meta device, where a copy would do nothing.
    """
    if tensor.is_meta:
        raise InvalidArgumentError(
            f"{name} is on the meta device, which holds no memory to restore into (a copy there does nothing); "
            "materialize it first (module.to_empty(device=...)), then restore"
        )
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    wanted = _DTYPES.get(tensor.dtype)
    if wanted is None or array.dtype != wanted[0] or array.shape != (tuple(tensor.shape) if shape is None else shape):
        held = describe(tensor) if shape is None else f"an uninitialized {dtype_name(tensor)} tensor"
        raise InvalidArgumentError(f"{name} is {held} but the checkpoint holds {array.dtype.name}{list(array.shape)}")
    return array


def copy_into(tensor: torch.Tensor, array: np.ndarray) -> None:
    """Write a value that :func:`check_value` accepted into the tensor's existing memory."""
    out = destination(tensor)
    if out is not None:
        np.copyto(out, array)
        return
    dtype, through = _DTYPES[tensor.dtype]
    flat = np.ascontiguousarray(array).reshape(-1)
    if through is not None:
        flat = flat.view(_DTYPES[through][0])
    target = tensor.detach().view(-1) if tensor.is_contiguous() else None
    step = max(1, DEVICE_CHUNK_BYTES // max(1, dtype.itemsize))
    with torch.no_grad():
        if target is None:
            source = torch.from_numpy(flat.copy())
            tensor.copy_((source.view(tensor.dtype) if through is not None else source).reshape(tensor.shape))
            return
        for start in range(0, flat.size, step):
            piece = torch.from_numpy(flat[start : start + step].copy())
            target[start : start + step].copy_(piece.view(tensor.dtype) if through is not None else piece)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype a checkpoint value of numpy ``dtype`` is restored as.

    Raises:
        InvalidArgumentError: torch has none (a string tensor, ...).
    """
    for found, (numpy_dtype, _) in _DTYPES.items():
        if numpy_dtype == dtype:
            return found
    raise InvalidArgumentError(f"a checkpoint value of dtype {dtype} has no torch dtype")


def new_tensor(array: np.ndarray) -> torch.Tensor:
    """A new CPU tensor holding a copy of ``array`` (bfloat16 and float8 included)."""
    found = torch_dtype(array.dtype)
    through = _DTYPES[found][1]
    source = np.array(array, copy=True, order="C")
    if through is not None:
        return torch.from_numpy(source.view(_DTYPES[through][0])).view(found)
    return torch.from_numpy(source)
