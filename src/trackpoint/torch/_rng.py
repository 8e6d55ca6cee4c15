"""``RNGState``: the random generators of torch (and CUDA, when present), numpy and Python's ``random``."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from trackpoint import Trackable
from trackpoint._io import bounded_json
from trackpoint.errors import InvalidArgumentError
from trackpoint.protocol import PYTHON_STATE

__all__ = ["RNGState"]

_TORCH = "torch"
_NUMPY_KEYS = "numpy_keys"


def _cuda_names() -> list[str]:
    return [f"cuda_{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


class RNGState(Trackable):
    """The state of torch's, numpy's (legacy global) and Python's random generators, saved
    with the checkpoint and put back by a restore, so that a resumed run draws the same
    numbers as an uninterrupted one.

    torch's CPU generator state and each CUDA device's are uint8 values, numpy's MT19937 key
    a uint32 value; the rest is JSON.

    Examples:
        >>> import random, tempfile
        >>> import trackpoint as tp, trackpoint.torch as tpt
        >>> ckpt = tpt.Checkpoint(rng=tpt.RNGState())
        >>> path = ckpt.write(tempfile.mkdtemp() + "/ckpt")
        >>> first = random.random()
        >>> _ = ckpt.read(path)
        >>> random.random() == first
        True
    """

    def _checkpoint_tensor_names(self) -> list[str]:
        return [_TORCH, _NUMPY_KEYS, *_cuda_names(), PYTHON_STATE]

    def _serialize_to_tensors(self) -> dict[str, Any]:
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        text = bounded_json.dumps(
            {
                "numpy": [name, int(pos), int(has_gauss), float(gauss)],
                "python": [version, list(internal), gauss_next],
            },
            "the random generator state",
        )
        out: dict[str, Any] = {_TORCH: torch.get_rng_state().numpy(), _NUMPY_KEYS: np.asarray(keys, np.uint32)}
        for i, cuda in enumerate(_cuda_names()):
            out[cuda] = torch.cuda.get_rng_state(i).numpy()
        out[PYTHON_STATE] = text.encode("utf-8")
        return out

    def _tp_destinations(self) -> dict[str, np.ndarray]:
        return {}

    def _tp_check_restored(self, tensors: dict[str, Any]) -> dict[str, Any]:
        try:
            stored = bounded_json.loads(tensors[PYTHON_STATE], "the stored random generator state")
            name, pos, has_gauss, gauss = stored["numpy"]
            version, internal, gauss_next = stored["python"]
            numpy_state = (name, np.asarray(tensors[_NUMPY_KEYS], np.uint32), int(pos), int(has_gauss), float(gauss))
            python_state = (int(version), tuple(int(x) for x in internal), gauss_next)
            probe = random.Random()
            probe.setstate(python_state)
            np.random.RandomState().set_state(numpy_state)
            torch_state = np.asarray(tensors[_TORCH])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"the stored random generator state is not what RNGState saves: {exc}") from exc
        if torch_state.dtype != np.uint8 or torch_state.shape != tuple(torch.get_rng_state().shape):
            raise InvalidArgumentError(
                f"the stored torch generator state is {torch_state.dtype}{list(torch_state.shape)}, not this torch's "
                f"uint8{list(torch.get_rng_state().shape)}"
            )
        cuda = {name: np.asarray(tensors[name]) for name in _cuda_names() if name in tensors}
        return {"torch": torch_state, "numpy": numpy_state, "python": python_state, "cuda": cuda}

    def _tp_take_restored(self, checked: dict[str, Any]) -> None:
        torch.set_rng_state(torch.from_numpy(np.array(checked["torch"])))
        for name, state in checked["cuda"].items():
            torch.cuda.set_rng_state(torch.from_numpy(np.array(state)), int(name.split("_")[1]))
        np.random.set_state(checked["numpy"])
        random.setstate(checked["python"])
