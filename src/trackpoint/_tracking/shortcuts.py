"""Which of the protocol's shortcuts a class of node takes, asked of the class once.

The core reads a class's optional hooks (:mod:`trackpoint._tracking.protocol`) through these
rather than per object; a subclass that overrides TF's methods without the matching shortcut
does not inherit it (:func:`inherit_shortcuts`, called for every subclass of ``tp.Trackable``).
"""

from __future__ import annotations

__all__ = ["inherit_shortcuts", "is_tensor_owner", "is_tensor_owner_class"]


def inherit_shortcuts(cls: type) -> None:
    """Drop the shortcuts ``cls`` inherits but would bypass its own TF methods with.

    A subclass (of ``tp.Variable``, say) that overrides ``_serialize_to_tensors`` without its own
    :meth:`VariableValue._tp_variable_value` and :attr:`Saveable._tp_copy_on_write` is saved
    through its override, its arrays copied for an async save; one that overrides either method or
    ``_checkpoint_full_name`` without its own :attr:`VariableValue._tp_value_fields` is saved
    through its methods; a subclass of a
    :class:`ValueOwner` that overrides ``_restore_from_tensors`` or ``_checkpoint_tensor_names``
    without its own :attr:`ValueOwner._tp_takes_value` (and, for the first, its own
    :meth:`TensorOwner._tp_check_restored`) is restored through those. Called for every subclass of
    ``tp.Trackable`` as it is made.
    """
    own = vars(cls)
    dropped: dict[str, object] = {}
    overrides_value = any(
        name in own for name in ("_serialize_to_tensors", "_tp_variable_value", "_checkpoint_full_name")
    )
    if overrides_value and "_tp_value_fields" not in own and getattr(cls, "_tp_value_fields", None) is not None:
        dropped["_tp_value_fields"] = None  # its methods say what it saves, no longer the fields
    if "_serialize_to_tensors" in own:
        if "_tp_variable_value" not in own and getattr(cls, "_tp_variable_value", None) is not None:
            dropped["_tp_variable_value"] = None  # the core reads None as "not offered"
        if "_tp_copy_on_write" not in own:
            dropped["_tp_copy_on_write"] = False
    inherits_value = "_tp_takes_value" not in own and getattr(cls, "_tp_takes_value", False)
    if inherits_value and ("_restore_from_tensors" in own or "_checkpoint_tensor_names" in own):
        dropped["_tp_takes_value"] = False
        if "_restore_from_tensors" in own and "_tp_check_restored" not in own:
            dropped["_tp_check_restored"] = None
    for name, value in dropped.items():
        setattr(cls, name, value)


def is_tensor_owner_class(cls: type) -> bool:
    """Whether instances of ``cls`` implement :class:`TensorOwner` (asked of the class: one lookup)."""
    return getattr(cls, "_tp_check_restored", None) is not None


def is_tensor_owner(obj: object) -> bool:
    """Whether ``obj``'s class implements :class:`TensorOwner`."""
    return is_tensor_owner_class(type(obj))
