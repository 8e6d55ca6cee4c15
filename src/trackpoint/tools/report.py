"""What ``trackpoint report`` shows of a checkpoint, or of the change between two.

One pass over each input's bytes: every tensor is read a chunk at a time (as the converter reads
it, checksums verified) and its statistics gathered from the chunks (:mod:`._report_stats`), so
memory stays bounded by a chunk, not by the largest tensor. With two inputs, each tensor of the
second is read beside its namesake of the first; a key only one of them has is hashed
(xxh3-128, with its dtype and shape) so that a tensor that was only renamed is found as such.

Inputs are TF checkpoints (a prefix, one of its files, or a directory with a ``checkpoint``
file) and safetensors weights (a file, an index or their directory). The tree is built from the
keys: an object-based checkpoint's keys are its objects' paths
(``model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE``), optimizer slots sit under their variable,
and the object graph itself is left out (it is the structure the tree shows); a TF1
checkpoint's keys split at ``/``, safetensors names at ``.``.

The result is plain data (``report`` below); ``trackpoint.cli._report_page`` turns it into one
self-contained HTML file.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> model = tp.Module(); model.dense = tp.Module()
    >>> model.dense.kernel = tp.Variable(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32))
    >>> path = tp.Checkpoint(model=model).write(os.path.join(tempfile.mkdtemp(), "ckpt"))
    >>> data = report(path)
    >>> [child["name"] for child in data["tree"]["children"]], data["inputs"][0]["params"]
    (['model'], 4)
    >>> stats = data["tensors"]["model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"]
    >>> stats["mean"], stats["zeros"], stats["shape"]
    (1.5, 0.25, [2, 2])
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import trackpoint as tp
from trackpoint._io import (
    OBJECT_ATTRIBUTES,
    OBJECT_GRAPH_KEY,
    OPTIMIZER_SLOTS,
    BundleReader,
    Entry,
    resolve_prefix,
    unescape,
)
from trackpoint.tools import _chunk_copy
from trackpoint.tools._hf_layout import SafetensorsSource, is_safetensors_path
from trackpoint.tools._report_stats import ChangeStats, TensorStats, digest, paired
from trackpoint.tools._to_tf import safetensors_chunks

__all__ = ["report"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class _Tensor:
    key: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    numeric: bool  # statistics apply (not strings, not complex)

    @property
    def params(self) -> int:
        return math.prod(self.shape)


class _Source:
    """One input: its tensors (key order), and each one's values a chunk at a time."""

    kind = ""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tensors: dict[str, _Tensor] = {}

    def chunks(self, key: str) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _TFSource(_Source):
    kind = "tf"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.reader = BundleReader(path)
        self.graph = False
        self._scratch = _chunk_copy.Scratch()
        self._entries: dict[str, Entry] = {}
        for entry in self.reader.entries():
            if entry.key == OBJECT_GRAPH_KEY:
                self.graph = True
                continue
            dtype = entry.dtype
            numeric = dtype is not None and not dtype.is_string and dtype.numpy.kind in "iufb"
            name = dtype.name if dtype is not None else f"dtype{entry.dtype_enum}"
            size = math.prod(entry.shape) * dtype.numpy.itemsize if numeric and dtype is not None else entry.size
            self.tensors[entry.key] = _Tensor(entry.key, name, tuple(entry.shape), size, numeric)
            self._entries[entry.key] = entry

    def chunks(self, key: str) -> Iterator[np.ndarray]:
        entry = self._entries[key]  # decoded with the others in __init__
        dtype = self.reader.checked(entry)
        if _chunk_copy.streams(entry, dtype):
            for piece in self._scratch.stored(self.reader, entry, dtype, None, key):
                yield np.frombuffer(piece, dtype.numpy)
        else:
            yield np.asarray(self.reader.read(key)).reshape(-1)

    def close(self) -> None:
        self.reader.close()


class _SafetensorsSource(_Source):
    kind = "safetensors"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.source = SafetensorsSource(path)
        self._memory = bytearray(_chunk_copy.CHUNK_BYTES)
        for name in sorted(self.source.where):
            info = self.source.where[name].tensors[name]
            self.tensors[name] = _Tensor(name, str(info.dtype), info.shape, info.nbytes, info.dtype.kind in "iufb")

    def chunks(self, key: str) -> Iterator[np.ndarray]:
        opened = self.source.where[key]
        dtype = opened.tensors[key].dtype
        for piece in safetensors_chunks(opened, key, self._memory):  # as the converter reads them
            yield np.frombuffer(piece, dtype)

    def close(self) -> None:
        self.source.close()


_CHECKPOINT_FILE = re.compile(r"\.(index|data-\d+-of-\d+)$")


def _open(path: str) -> _Source:
    """The input at ``path``: safetensors weights, or a TF checkpoint given by its prefix, one of
    its files, or a directory with a ``checkpoint`` file."""
    if is_safetensors_path(path):
        return _SafetensorsSource(path)
    try:
        return _TFSource(resolve_prefix(path))
    except tp.errors.NotFoundError:
        stripped = _CHECKPOINT_FILE.sub("", path)
        if stripped == path:
            raise
        return _TFSource(resolve_prefix(stripped))


def _components(key: str, source: _Source) -> tuple[list[str], str]:
    """The path of names from the root to ``key``'s node, and the node's kind."""
    if isinstance(source, _SafetensorsSource):
        return key.split("."), "variable"
    if not isinstance(source, _TFSource) or not source.graph:
        return key.split("/"), "variable"
    where, _, attribute = key.partition(f"/{OBJECT_ATTRIBUTES}/")
    variable, slot, owner = where.partition(f"/{OPTIMIZER_SLOTS}/")
    names = [unescape(name) for name in variable.split("/")] if variable else []
    kind = "variable"
    if slot:
        names.append("/".join(unescape(name) for name in owner.split("/")))  # "optimizer/m": its optimizer's slot m
        kind = "slot"
    if attribute and attribute != "VARIABLE_VALUE":
        names.append(attribute)
    return names or [key], kind


def _tree(source: _Source) -> dict[str, Any]:
    root: dict[str, Any] = {"name": "(root)", "path": "", "kind": "object", "key": None, "children": {}}
    for tensor in source.tensors.values():
        names, kind = _components(tensor.key, source)
        node = root
        for depth, name in enumerate(names):
            child: dict[str, Any] | None = node["children"].get(name)
            if child is None:
                path = "/".join(names[: depth + 1])
                child = {"name": name, "path": path, "kind": "object", "key": None, "children": {}}
                node["children"][name] = child
            node = child
        node.update(kind=kind, key=tensor.key, dtype=tensor.dtype, shape=list(tensor.shape))
    return _finish(root, source)


def _finish(node: dict[str, Any], source: _Source) -> dict[str, Any]:
    """Children as a list; bytes and parameters summed over each subtree."""
    children = [_finish(child, source) for child in node["children"].values()]
    tensor = source.tensors.get(node["key"]) if node["key"] is not None else None
    node["children"] = children
    node["bytes"] = (tensor.nbytes if tensor else 0) + sum(c["bytes"] for c in children)
    node["params"] = (tensor.params if tensor and tensor.numeric else 0) + sum(c["params"] for c in children)
    node.setdefault("dtype", None)
    node.setdefault("shape", None)
    return node


def _layer(key: str, source: _Source) -> str:
    names, _ = _components(key, source)
    return "/".join(names[:-1]) or names[0]


def report(path: str, other: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """The report's data for the checkpoint at ``path``, or for how ``other`` differs from it.

    Args:
        path: A TF checkpoint or safetensors weights (see the module docstring).
        other: A second input: the report then shows it, and how it changed from ``path``.
        progress: Called with (bytes read, bytes to read) as tensors are done.

    Returns:
        A dict as ``trackpoint.cli._report_page.render`` takes it: ``inputs``, ``tree``,
        ``tensors`` (statistics per key) and, with ``other``, ``diff``.

    Raises:
        NotFoundError: Nothing at a path.
        DataLossError: A tensor fails its checksum or a file is damaged (naming file and key).
    """
    sources = [_open(path)] + ([_open(other)] if other is not None else [])
    try:
        return _report(sources, progress or (lambda done, total: None))
    finally:
        for source in sources:
            source.close()


def _report(sources: list[_Source], progress: Progress) -> dict[str, Any]:
    shown, old = sources[-1], (sources[0] if len(sources) == 2 else None)
    before = old.tensors if old is not None else {}
    added = [k for k in shown.tensors if old is not None and k not in before]
    removed = [k for k in before if k not in shown.tensors]
    total = sum(t.nbytes for t in shown.tensors.values() if t.numeric)
    total += sum(t.nbytes for k, t in before.items() if t.numeric and (k in shown.tensors or k in removed))
    done = 0
    tensors: dict[str, Any] = {}
    changes: list[dict[str, Any]] = []
    norms: dict[str, tuple[float, float]] = {}  # key -> (squared norm of the change, of the old values)
    hashes: dict[str, str] = {}  # of the added tensors
    for key, tensor in shown.tensors.items():
        stats = TensorStats(tensor.params, hashed=key in added)
        was = before.get(key)
        if was is not None and was.shape == tensor.shape and was.numeric and tensor.numeric:
            change = ChangeStats()
            for a, b in paired(old.chunks(key), shown.chunks(key)):  # type: ignore[union-attr]
                stats.add(b)
                change.add(a, b)
            changes.append(_change(key, tensor) | change.result())
            norms[key] = (change.diff_sq, change.old_sq)
        elif tensor.numeric:
            for chunk in shown.chunks(key):
                stats.add(chunk)
        if was is not None and not (was.shape == tensor.shape and was.numeric and tensor.numeric):
            changes.append(_change(key, tensor) | {"note": f"was {was.dtype}{list(was.shape)}"})
        if stats.hash is not None and tensor.numeric:
            hashes[key] = f"{tensor.dtype}{tensor.shape}{stats.hash.hexdigest()}"
        empty = dict.fromkeys(("mean", "std", "min", "max", "zeros", "hist"))
        tensors[key] = {"dtype": tensor.dtype, "shape": list(tensor.shape), "bytes": tensor.nbytes}
        tensors[key] |= {"params": tensor.params, "nan": 0, "inf": 0, "binned": 0}
        tensors[key] |= stats.result() if tensor.numeric else empty
        done += (tensor.nbytes if tensor.numeric else 0) + (was.nbytes if was is not None and was.numeric else 0)
        progress(done, total)
    data: dict[str, Any] = {
        "title": "trackpoint report: " + (f"{sources[0].path} -> {shown.path}" if old is not None else shown.path),
        "generated": f"trackpoint {tp.__version__}",
        "inputs": [_summary(source) for source in sources],
        "tree": _tree(shown),
        "tensors": tensors,
        "diff": None,
    }
    if old is not None:
        renamed: list[list[str]] = []
        by_hash = {digest: key for key, digest in hashes.items()}
        for key in removed:
            tensor = before[key]
            if not tensor.numeric:
                continue
            found = by_hash.pop(f"{tensor.dtype}{tensor.shape}{digest(old.chunks(key))}", None)
            if found is not None:
                renamed.append([key, found])
            done += tensor.nbytes
            progress(done, total)
        moved = {name for pair in renamed for name in pair}
        changes.sort(key=lambda c: -1.0 if c["rel_l2"] is None else c["rel_l2"], reverse=True)
        data["diff"] = {
            "added": [k for k in added if k not in moved],
            "removed": [k for k in removed if k not in moved],
            "renamed": renamed,
            "changed": changes,
            "layers": _layers(norms, shown),
        }
    return data


def _change(key: str, tensor: _Tensor) -> dict[str, Any]:
    return {"key": key, "dtype": tensor.dtype, "shape": list(tensor.shape), "rel_l2": None, "cosine": None}


def _summary(source: _Source) -> dict[str, Any]:
    return {
        "path": source.path,
        "kind": source.kind,
        "tensors": len(source.tensors),
        "bytes": sum(t.nbytes for t in source.tensors.values()),
        "params": sum(t.params for t in source.tensors.values() if t.numeric),
    }


def _layers(norms: dict[str, tuple[float, float]], source: _Source) -> list[dict[str, Any]]:
    """The change per layer (a tensor's parent path), in key order, for the page's strip: the norm of
    all its tensors' change over the norm of their old values."""
    sums: dict[str, list[float]] = {}
    for key in sorted(norms):
        layer = sums.setdefault(_layer(key, source), [0.0, 0.0, 0])
        layer[0] += norms[key][0]
        layer[1] += norms[key][1]
        layer[2] += 1
    return [
        {"name": name, "rel_l2": math.sqrt(diff / old) if old else None, "tensors": int(count)}
        for name, (diff, old, count) in sums.items()
    ]
