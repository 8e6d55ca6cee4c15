"""Which checkpoint a command-line PATH means, and which tensor a ``--tensor NAME``."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable

import trackpoint as tp
from trackpoint._io import exists, file_prefix, is_directory, listing, storage_for
from trackpoint.cli._output import out

__all__ = ["resolve", "tensor_key"]


def _note_if_outside(directory: str, prefix: str) -> None:
    """Say so when ``directory``'s state file names a checkpoint that, links resolved, is not directly
    in it (the test CheckpointManager applies before deleting one): the bytes come from there."""
    real = storage_for(prefix).real_outside(directory, prefix)
    if real is not None:
        out(f"note: the state file in {directory} names a checkpoint outside it: {real}", sys.stderr)


def resolve(path: str) -> str:
    """The checkpoint prefix a command-line PATH means.

    PATH is a prefix, one of its files (``run/ckpt-1.index``, ``run/ckpt-1.data-00000-of-00001``),
    or a directory whose ``checkpoint`` file names one.

    Raises:
        NotFoundError: Nothing is there; the message lists the checkpoints that are.
    """
    if is_directory(path):
        state = tp.get_checkpoint_state(path)
        if state is None:
            raise tp.errors.NotFoundError(f"{path} has no 'checkpoint' state file{listing(path)}")
        prefix = state.model_checkpoint_path
        if not exists(prefix + ".index"):
            return path  # the library's message says what the state file names and what is missing
        _note_if_outside(path, prefix)
        return prefix
    if exists(path + ".index"):
        return path
    stripped = file_prefix(path)
    if stripped is not None and exists(stripped + ".index"):
        return stripped
    raise tp.errors.NotFoundError(f"no checkpoint at {path}{listing(os.path.dirname(path))}")


def tensor_key(name: str, keys: Iterable[str], paths: dict[str, str], prefix: str) -> str:
    """The key ``--tensor NAME`` means: a key, an object path as the listing shows it, with or
    without ``(root).`` (``model.dense.kernel``), or the key's object part (``model/dense/kernel``).

    Examples:
        >>> key = "model/w/.ATTRIBUTES/VARIABLE_VALUE"
        >>> tensor_key("model.w", [key], {key: "(root).model.w"}, "ckpt") == key
        True

    Raises:
        NotFoundError: No tensor goes by that name; the message offers close ones.
        InvalidArgumentError: The name fits several tensors; the message lists their keys.
    """
    spellings: dict[str, set[str]] = {}
    preferred = {}
    for key in keys:
        names = {key, key.partition("/.ATTRIBUTES/")[0]}
        if key in paths:
            names |= {paths[key], paths[key].removeprefix("(root).")}
        for spelling in names:
            spellings.setdefault(spelling, set()).add(key)
        preferred[key] = paths[key].removeprefix("(root).") if key in paths else key
    found = sorted(spellings.get(name, ()))
    if len(found) == 1:
        return found[0]
    if found:
        raise tp.errors.InvalidArgumentError(
            f"{name!r} names {len(found)} tensors in {prefix}: {', '.join(found)}; pass one of these keys"
        )
    similar = sorted(s for s in spellings if name in s) or difflib.get_close_matches(name, list(spellings), 10)
    close = list(dict.fromkeys(preferred[k] for s in similar for k in sorted(spellings[s])))[:5]
    hint = f"; close names: {', '.join(close)}" if close else f"; 'trackpoint inspect {prefix}' lists them"
    raise tp.errors.NotFoundError(f"no tensor {name!r} in {prefix}{hint}")
