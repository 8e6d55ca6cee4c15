"""Restore-on-create for torch: a parameter, buffer or submodule registered after a restore
reached its module receives the value waiting for it as it is registered.

torch calls global registration hooks (``register_module_parameter_registration_hook`` and
its buffer and module twins) before it stores the new object on its module. They are
installed only while some module has values waiting, and removed when none has: a program
that never restores early pays nothing on each registration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.nn.modules import module as torch_module
from torch.utils.weak import WeakIdKeyDictionary

if TYPE_CHECKING:
    from trackpoint.torch._nodes import ModuleNode

__all__ = ["installed", "waiting"]

_waiting: WeakIdKeyDictionary = WeakIdKeyDictionary()  # module -> its node, which has values waiting
_handles: list[Any] = []


def waiting(module: torch.nn.Module, node: ModuleNode) -> None:
    """Note that ``node`` (``module``'s) has values waiting for children it lacks."""
    _waiting[module] = node
    if not _handles:
        _handles.extend(
            (
                torch_module.register_module_parameter_registration_hook(_registered),
                torch_module.register_module_buffer_registration_hook(_registered),
                torch_module.register_module_module_registration_hook(_registered),
            )
        )


def installed() -> bool:
    """Whether the registration hooks are installed (some module has values waiting)."""
    return bool(_handles)


def _registered(module: torch.nn.Module, name: str, value: Any) -> None:
    node = _waiting.get(module)
    if node is None or value is None:
        return
    if node._tp_has_pending(name):
        from trackpoint.torch._nodes import module_node, tensor_node

        child = tensor_node(value, name) if isinstance(value, torch.Tensor) else module_node(value)
        node._handle_deferred_dependencies(name, child)  # raises if it refuses: the registration fails
    if not node._tp_has_pending():
        del _waiting[module]
        if not len(_waiting):
            for handle in _handles:
                handle.remove()
            _handles.clear()
