"""The text tree of ``tp.CheckpointView.tree``: each object with its values' dtype, shape and size.

Examples:
    >>> import tempfile
    >>> import trackpoint as tp
    >>> path = tp.Checkpoint(w=tp.Variable([[1.0, 2.0]])).write(tempfile.mkdtemp() + "/ckpt")
    >>> from trackpoint._format.bundle_reader import BundleReader
    >>> from trackpoint._graph.object_graph import node_paths, read_object_graph
    >>> with BundleReader(path) as reader:
    ...     graph = read_object_graph(reader)
    ...     print(render_tree(graph, node_paths(graph), reader))
    (root)
      w  float32[1,2]  8 B
"""

from __future__ import annotations

import math

from trackpoint._format._proto import trackable_object_graph_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.text import printable

__all__ = ["describe", "render_tree"]


def describe(reader: BundleReader, key: str) -> tuple[str, list[int], int]:
    """The dtype name, shape and size in bytes of the value at ``key``, from the index alone
    (see :meth:`~trackpoint.CheckpointView.describe`).

    Raises:
        NotFoundError: The checkpoint has no such key.
    """
    entry = reader.entry(key)
    name = entry.dtype.name if entry.dtype is not None else f"dtype{entry.dtype_enum}"
    size = entry.size
    if entry.is_sliced and entry.dtype is not None and not entry.dtype.is_string:
        size = math.prod(entry.shape) * entry.dtype.numpy.itemsize
    return name, list(entry.shape), size


def render_tree(graph: pb.TrackableObjectGraph, paths: dict[int, str], reader: BundleReader) -> str:
    """The graph as an indented tree, slot variables under the variable they belong to; an
    object reached again is shown once more as a line ``name -> its path``."""
    slots: dict[int, list[tuple[str, int, int]]] = {}
    for opt_id, node in enumerate(graph.nodes):
        for ref in node.slot_variables:
            slots.setdefault(ref.original_variable_node_id, []).append(
                (ref.slot_name, opt_id, ref.slot_variable_node_id)
            )
    lines: list[str] = []
    seen: set[int] = set()

    def values(node_id: int) -> str:
        parts = []
        for attribute in graph.nodes[node_id].attributes:
            if attribute.checkpoint_key == "" or attribute.checkpoint_key not in reader:
                parts.append(f"{attribute.name}: missing")
                continue
            dtype, shape, size = describe(reader, attribute.checkpoint_key)
            label = "" if attribute.name == "VARIABLE_VALUE" else f"{attribute.name}="
            parts.append(f"{label}{dtype}{shape}  {_bytes(size)}".replace(", ", ","))
        return "  " + "  ".join(parts) if parts else ""

    # Depth first with an explicit stack: a hostile graph may be a chain of any depth.
    stack: list[tuple[int, str, int]] = [(0, "(root)", 0)]
    while stack:
        node_id, name, depth = stack.pop()
        if node_id in seen:
            if node_id != 0:
                lines.append(_indent(depth) + f"{name} -> {paths[node_id]}")
            continue
        seen.add(node_id)
        lines.append(_indent(depth) + name + values(node_id))
        for slot_name, opt_id, slot_id in slots.get(node_id, ()):
            owner = paths.get(opt_id, f"node {opt_id}").removeprefix("(root).")
            lines.append(_indent(depth + 1) + f"[slot {slot_name!r} of {owner}]" + values(slot_id))
        for child in reversed(graph.nodes[node_id].children):
            stack.append((child.node_id, child.local_name, depth + 1))
    # One line per object, whatever its name holds (a line break, a terminal escape).
    return "\n".join(printable(line) for line in lines)


def _indent(depth: int) -> str:
    """Two spaces a level, capped so that a hostile, very deep graph cannot blow up the text."""
    return "  " * depth if depth <= 40 else "  " * 40 + f"[depth {depth}] "


def _bytes(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    scaled = float(size)
    for unit in ("KiB", "MiB"):
        scaled /= 1024
        if scaled < 1024:
            return f"{scaled:.1f} {unit}"
    return f"{scaled / 1024:.1f} GiB"
