"""What ``trackpoint report`` shows of a checkpoint, or of the change between two.

One pass over each input's bytes, checksums verified. A tensor is read a chunk at a time (as
the converter reads it) and its statistics gathered from the chunks (:mod:`._report_stats`), so
memory stays bounded by a few chunks, not by the largest tensor (a sliced one is put together
whole first, as every reader does). A large one is read in two parts at once on two threads,
unless it is sliced or its bytes are hashed. Small tensors are read many at once and summarised a batch at a time
(:mod:`._report_batch`). With two inputs, each tensor of the second is read beside its namesake
of the first; a key only one of them has is hashed (xxh3-128, with its dtype and shape) so that
a tensor that was only renamed is found as such.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import trackpoint as tp
from trackpoint._io import OBJECT_ATTRIBUTES, OPTIMIZER_SLOTS, gc_paused, parallel_map, unescape
from trackpoint.tools import _chunk_copy
from trackpoint.tools._report_batch import batch_changes, batch_stats
from trackpoint.tools._report_sources import PARTS, Input, SafetensorsInput, Tensor, TFInput, open_input
from trackpoint.tools._report_stats import ChangeStats, TensorStats, Workspace, digest, paired

__all__ = ["report"]

Progress = Callable[[int, int], None]

# A tensor of at least _SPLIT_BYTES is read and summarised in PARTS parts at once, one per
# thread: file reads, checksums and numpy's passes over a chunk release the GIL, and a report's
# work per byte is several passes (``_report_stats``), so one core cannot keep up with the disk.
_SPLIT_BYTES = 4 * _chunk_copy.CHUNK_BYTES
# Tensors of at most _SMALL_ELEMENTS elements are read many at once and summarised together, a
# batch of about _BATCH_ELEMENTS at a time (``_report_batch``): one by one, each would cost some
# fifty numpy calls where reading it costs one. A batch's temporaries stay below the size the
# allocator serves from fresh pages (128 KiB), which fault in slowly (see ``Workspace``).
_SMALL_ELEMENTS = 1 << 12
_BATCH_ELEMENTS = 1 << 13
# Tensors between those and _SPLIT_BYTES are read on this thread alone. Measured slower: two
# threads each taking whole tensors of 512 KiB (0.60 s against 0.43 for 1 GiB; their many short
# numpy calls each wait for the other's hold on the GIL), cutting 2.25 MiB tensors in two parts
# (0.39 s against 0.36), and reading the next tensor on a helper thread meanwhile (a thread per
# tensor costs 85 us here; no gain for 2.25 MiB tensors, 0.75 s against 0.42 for 512 KiB ones).


def _components(key: str, source: Input) -> tuple[list[str], str]:
    """The path of names from the root to ``key``'s node, and the node's kind."""
    if isinstance(source, SafetensorsInput):
        return key.split("."), "variable"
    if not isinstance(source, TFInput) or not source.graph:
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


def _tree(source: Input, places: dict[str, tuple[list[str], str]]) -> dict[str, Any]:
    """The tree of ``source``'s tensors, each at its place (:func:`_components`)."""
    root: dict[str, Any] = {"name": "(root)", "path": "", "kind": "object", "key": None, "children": {}}
    for tensor in source.tensors.values():
        names, kind = places[tensor.key]
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


def _finish(node: dict[str, Any], source: Input) -> dict[str, Any]:
    """Children as a list; bytes and parameters summed over each subtree."""
    children = [_finish(child, source) for child in node["children"].values()]
    tensor = source.tensors.get(node["key"]) if node["key"] is not None else None
    node["children"] = children
    node["bytes"] = (tensor.nbytes if tensor else 0) + sum(c["bytes"] for c in children)
    node["params"] = (tensor.params if tensor and tensor.numeric else 0) + sum(c["params"] for c in children)
    node.setdefault("dtype", None)
    node.setdefault("shape", None)
    return node


def report(path: str, other: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """The report's data for the checkpoint at ``path``, or for how ``other`` differs from it.

    Args:
        path: A TF checkpoint or safetensors weights (see the module docstring).
        other: A second input: the report then shows it, and how it changed from ``path``.
        progress: Called with (bytes read, bytes to read) as tensors, or batches of small ones, are done.

    Returns:
        A dict as ``trackpoint.cli._report_page.render`` takes it: ``inputs``, ``tree``,
        ``tensors`` (statistics per key) and, with ``other``, ``diff``.

    Raises:
        NotFoundError: Nothing at a path.
        DataLossError: A tensor fails its checksum or a file is damaged (naming file and key).
    """
    sources: list[Input] = []
    try:
        sources.append(open_input(path))
        if other is not None:
            sources.append(open_input(other))
        # The report is a tree of dicts and lists, a few per tensor, with no cycles: the collector's
        # passes over it as it grows cost a quarter of the time for 20,000 small tensors.
        with gc_paused():
            return _report(sources, progress or (lambda done, total: None))
    finally:
        for source in sources:
            source.close()


def _report(sources: list[Input], progress: Progress) -> dict[str, Any]:
    shown, old = sources[-1], (sources[0] if len(sources) == 2 else None)
    before = old.tensors if old is not None else {}
    added_keys = [k for k in shown.tensors if old is not None and k not in before]
    added = set(added_keys)
    removed = [k for k in before if k not in shown.tensors]
    done = 0
    tensors: dict[str, Any] = {key: _empty(tensor) for key, tensor in shown.tensors.items()}
    changes: list[dict[str, Any]] = []
    norms: dict[str, tuple[float, float]] = {}  # key -> (squared norm of the change, of the old values)
    hashes: dict[str, str] = {}  # of the added tensors
    compared: set[str] = set()
    for key, tensor in shown.tensors.items():
        was = before.get(key)
        if was is not None and was.shape == tensor.shape and was.numeric and tensor.numeric:
            compared.add(key)
        elif was is not None:
            changes.append(_change(key, tensor) | {"note": f"was {was.dtype}{list(was.shape)}"})
    # What is read: every numeric tensor shown, the old ones compared with them, the removed ones (hashed).
    total = sum(t.nbytes for t in shown.tensors.values() if t.numeric) + sum(before[k].nbytes for k in compared)
    total += sum(before[k].nbytes for k in removed if before[k].numeric)
    small = [
        key
        for key, tensor in shown.tensors.items()
        if tensor.numeric and tensor.params <= _SMALL_ELEMENTS  # the old one has as many: compared, or left out
    ]
    for keys, new, old_values in _batches(small, shown, old, compared):
        for key, result in zip(keys, batch_stats(new)):
            tensors[key] |= result
        pairs = [(old_values[key], value, key) for key, value in zip(keys, new) if key in old_values]
        for (_, _, key), result in zip(pairs, batch_changes([p[0] for p in pairs], [p[1] for p in pairs])):
            changes.append(_change(key, shown.tensors[key]) | result)
            norms[key] = (changes[-1].pop("diff_sq"), changes[-1].pop("old_sq"))
        for key, value in zip(keys, new):
            if key in added:
                tensor = shown.tensors[key]
                hashes[key] = f"{tensor.dtype}{tensor.shape}{digest(iter([value]))}"  # as _pass_over's
            done += shown.tensors[key].nbytes + (before[key].nbytes if key in old_values else 0)
        progress(done, total)
    workspaces = [Workspace() for _ in range(PARTS)]  # one per thread, reused tensor after tensor
    for key, tensor in shown.tensors.items():
        if not tensor.numeric or tensor.params <= _SMALL_ELEMENTS:
            continue
        summary = _pass_over(key, shown, old if key in compared else None, added, workspaces)
        tensors[key] |= summary.stats
        if summary.change is not None and summary.norms is not None:
            changes.append(_change(key, tensor) | summary.change)
            norms[key] = summary.norms
        if summary.hash is not None:
            hashes[key] = summary.hash
        done += tensor.nbytes + (before[key].nbytes if key in compared else 0)
        progress(done, total)
    places = {key: _components(key, shown) for key in shown.tensors}
    data: dict[str, Any] = {
        "title": "trackpoint report: " + (f"{sources[0].path} -> {shown.path}" if old is not None else shown.path),
        "generated": f"trackpoint {tp.__version__}",
        "inputs": [_summary(source) for source in sources],
        "tree": _tree(shown, places),
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
            hashed = digest(old.chunks(key))
            old.verify(key)
            found = by_hash.pop(f"{tensor.dtype}{tensor.shape}{hashed}", None)
            if found is not None:
                renamed.append([key, found])
            done += tensor.nbytes
            progress(done, total)
        moved = {name for pair in renamed for name in pair}
        # Largest change first, none (not comparable) last, ties by key.
        changes.sort(key=lambda c: (c["rel_l2"] is None, -(c["rel_l2"] or 0.0), c["key"]))
        data["diff"] = {
            "added": [k for k in added_keys if k not in moved],
            "removed": [k for k in removed if k not in moved],
            "renamed": renamed,
            "changed": changes,
            "layers": _layers(norms, places),
        }
    return data


def _empty(tensor: Tensor) -> dict[str, Any]:
    """A tensor's entry in the report's ``tensors``, before (or without) its statistics."""
    return {"dtype": tensor.dtype, "shape": list(tensor.shape), "bytes": tensor.nbytes, "params": tensor.params} | {
        "mean": None,
        "std": None,
        "min": None,
        "max": None,
        "zeros": None,
        "nan": 0,
        "inf": 0,
        "hist": None,
        "binned": 0,
    }


def _batches(
    keys: list[str], shown: Input, old: Input | None, compared: set[str]
) -> Iterator[tuple[list[str], list[np.ndarray], dict[str, np.ndarray]]]:
    """The values of ``keys`` (small tensors) in batches of about :data:`_BATCH_ELEMENTS`, with the
    old values of those among them that are ``compared``."""
    new_values = shown.values(keys)
    old_values = old.values([key for key in keys if key in compared]) if old is not None else iter(())
    batch: list[str] = []
    values: list[np.ndarray] = []
    olds: dict[str, np.ndarray] = {}
    elements = 0
    for key in keys:
        batch.append(key)
        values.append(next(new_values))
        if key in compared:
            olds[key] = next(old_values)
        elements += values[-1].size
        if elements >= _BATCH_ELEMENTS:
            yield batch, values, olds
            batch, values, olds, elements = [], [], {}, 0
    if batch:
        yield batch, values, olds


@dataclass(frozen=True)
class _Summary:
    """What one pass over a tensor found."""

    stats: dict[str, Any]  # TensorStats.result()
    change: dict[str, Any] | None  # ChangeStats.result(), given the old input
    norms: tuple[float, float] | None  # the squared norms of the change and of the old values
    hash: str | None  # of an added tensor: dtype, shape and xxh3-128, to find it renamed


def _pass_over(key: str, shown: Input, old: Input | None, added: set[str], workspaces: list[Workspace]) -> _Summary:
    """One pass over ``key`` (and its namesake in ``old``, to compare them): a large tensor cut
    into ``PARTS`` ranges, each read and summarised on a thread of its own (part ``i`` in
    buffer ``i`` and ``workspaces[i]``), a smaller one whole on this thread."""
    tensor = shown.tensors[key]
    split = (
        tensor.nbytes >= _SPLIT_BYTES
        and key not in added  # hashed: a hash is of the bytes in order
        and shown.splits(key)
        and (old is None or old.splits(key))
    )
    parts = PARTS if split else 1
    bounds = [tensor.params * part // parts for part in range(parts + 1)]

    def part_of(part: int) -> tuple[TensorStats, ChangeStats | None]:
        start, stop = bounds[part], bounds[part + 1]
        mine = TensorStats(tensor.params, hashed=key in added, start=start, workspace=workspaces[part])
        new = shown.chunks(key, part, start, stop)
        if old is None:
            for chunk in new:
                mine.add(chunk)
            return mine, None
        change = ChangeStats(workspaces[part])
        for a, b in paired(old.chunks(key, part, start, stop), new):
            change.add(a, b, mine.add(b))
        return mine, change

    results = parallel_map(part_of, range(parts), parts)
    shown.verify(key)
    if old is not None:
        old.verify(key)
    stats, change = results[0]
    for more, more_change in results[1:]:
        stats.merge(more)
        if change is not None and more_change is not None:
            change.merge(more_change)
    return _Summary(
        stats.result(),  # now, while the sample is still in the workspace
        change.result() if change is not None else None,
        (change.diff_sq, change.old_sq) if change is not None else None,
        f"{tensor.dtype}{tensor.shape}{stats.hash.hexdigest()}" if stats.hash is not None else None,
    )


def _change(key: str, tensor: Tensor) -> dict[str, Any]:
    return {"key": key, "dtype": tensor.dtype, "shape": list(tensor.shape), "rel_l2": None, "cosine": None}


def _summary(source: Input) -> dict[str, Any]:
    return {
        "path": source.path,
        "kind": source.kind,
        "tensors": len(source.tensors),
        "bytes": sum(t.nbytes for t in source.tensors.values()),
        "params": sum(t.params for t in source.tensors.values() if t.numeric),
    }


def _layers(norms: dict[str, tuple[float, float]], places: dict[str, tuple[list[str], str]]) -> list[dict[str, Any]]:
    """The change per layer (a tensor's parent path), in key order, for the page's strip: the norm of
    all its tensors' change over the norm of their old values."""
    sums: dict[str, list[float]] = {}
    for key in sorted(norms):
        names = places[key][0]
        layer = sums.setdefault("/".join(names[:-1]) or names[0], [0.0, 0.0, 0])
        layer[0] += norms[key][0]
        layer[1] += norms[key][1]
        layer[2] += 1
    return [
        {"name": name, "rel_l2": math.sqrt(diff / old) if old else None, "tensors": int(count)}
        for name, (diff, old, count) in sums.items()
    ]
