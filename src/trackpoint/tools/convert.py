"""``tp.convert``: TF checkpoints to safetensors and back, streaming one tensor at a time.

The direction follows ``src``: safetensors weights (a ``.safetensors`` file, a
``.safetensors.index.json``, or a directory holding them) convert to a TF checkpoint at the
prefix ``dst``; anything else is read as a TF checkpoint (a prefix, or a directory with a
``checkpoint`` file) and converts to safetensors. See :mod:`._tf_names` for how TF keys are
named, :mod:`._to_tf` for the object graph built from dotted names (and the writing of a TF checkpoint),
:mod:`._to_safetensors` for the writing of safetensors files, :mod:`._names` for the rules
(rename, only, drop, transpose) and :mod:`._hf_layout` for the sharded layout.

Everything is planned from the index or the header first (names, conflicts, dtypes
safetensors cannot hold) before a byte is written. To safetensors, a plain tensor's stored bytes
are copied in 1 MiB pieces and its checksum checked at its end (:mod:`._tf_stream`); a sliced,
string, big-endian or transposed one is read whole into one reused buffer. From safetensors,
a tensor of 1 MiB or more is copied to the bundle writer in 2 MiB chunks through one reused buffer
(:mod:`._to_tf`), a smaller one read whole into a second buffer; a transposed one is read in blocks
of rows (16 MiB) into a third buffer and put transposed into the second. So memory stays at a few
MiB plus the largest tensor read whole (small or transposed), plus a bounded block for a transpose
(to safetensors, twice the largest transposed tensor at most).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackpoint._io import (
    OBJECT_GRAPH_KEY,
    BundleReader,
    use_storage_options_for_urls,
)
from trackpoint.errors import InvalidArgumentError
from trackpoint.reader import CheckpointReader
from trackpoint.tools import _embedded_graph, _hf_layout, _to_tf
from trackpoint.tools._hf_layout import parse_size
from trackpoint.tools._names import MappingRow, NameRules, RenameRules, check_conflicts, mapping_table, parse_rename
from trackpoint.tools._safetensors_format import MAX_HEADER_BYTES, METADATA_KEY, safetensors_dtype
from trackpoint.tools._tf_names import default_names
from trackpoint.tools._to_safetensors import check_destination, write_safetensors
from trackpoint.tools.rewrite import source_prefix

# parse_rename, parse_size and mapping_table: the forms ``rename=`` and ``max_shard_size=`` take, and
# the table of a Conversion's mapping, for callers (the command line first) that check or show them;
# NameRules and RenameRules: the name rules themselves, for loaders that take them (trackpoint.torch).
__all__ = ["Conversion", "NameRules", "RenameRules", "convert", "mapping_table", "parse_rename", "parse_size"]


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert` did (or, with ``dry_run``, would do).

    Attributes:
        direction: ``"tf->safetensors"`` or ``"safetensors->tf"``.
        mapping: One row per converted tensor: source key, new name, dtype, shape, transposed.
        skipped: ``(source key, reason)`` of tensors left out by ``skip_unsupported``.
        files: The files written, the index last (empty for a dry run).
    """

    direction: str
    mapping: tuple[MappingRow, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    files: tuple[str, ...] = ()


def convert(
    src: str,
    dst: str,
    *,
    keys: str | None = None,
    rename: RenameRules | None = None,
    only: str | Iterable[str] | None = None,
    drop: str | Iterable[str] | None = None,
    transpose: str | Iterable[str] | None = None,
    include_slots: bool = False,
    include_save_counter: bool = False,
    include_graph: bool = False,
    skip_unsupported: bool = False,
    max_shard_size: int | str = _hf_layout.DEFAULT_SHARD_SIZE,
    save_counter: bool = True,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Conversion:
    """Convert a TF checkpoint to safetensors, or safetensors weights to a TF checkpoint.

    Args:
        src: A TF checkpoint (prefix, or directory with a ``checkpoint`` file), or safetensors
            weights (a ``.safetensors`` file, a ``.safetensors.index.json``, or their directory).
        dst: For a TF source, a ``.safetensors`` file name or a directory (created; the file is
            ``model.safetensors``); shards are named ``model-00001-of-0000N.safetensors`` beside
            ``model.safetensors.index.json``. For a safetensors source, the checkpoint prefix.
        keys: TF source: ``"path"`` (the default) names tensors by object path
            (``model.dense.kernel``), ``"tf"`` by their raw keys.
        rename: ``'REGEX=REPLACEMENT'`` rules (or ``(regex, replacement)`` pairs in a list, or a
            dict), applied in order; a bare tuple is a sequence of rules (see :mod:`._names`).
        only: Keep only tensors whose (source-side) name matches one of these patterns.
        drop: Leave out tensors whose name matches one of these patterns.
        transpose: Transpose the 2-D tensors whose name matches (``[in, out]`` ↔ ``[out, in]``).
        include_slots: TF source: also convert optimizer slot variables.
        include_save_counter: TF source: also convert the root's ``save_counter``.
        include_graph: TF source: keep the whole checkpoint for an exact way back: every tensor
            under its TF key (slots and ``save_counter`` too), the object graph and the string
            tensors in the first file's metadata (see :mod:`._embedded_graph`); takes no rules.
            Converting such weights back to TF rebuilds the same graph and keys.
        skip_unsupported: Leave out (and report in :attr:`Conversion.skipped`) tensors the
            destination cannot hold (strings, complex128, ...) instead of refusing.
        max_shard_size: Largest safetensors shard, in bytes or like ``"500MB"`` (default 5 GB).
        save_counter: Safetensors source: give the checkpoint a ``save_counter`` (0), so that
            ``tf.train.Checkpoint(...).restore()`` passes ``assert_consumed()``; False for
            ``read()``, which expects none (unless the weights hold one themselves).
        dry_run: Plan only: return the mapping, write nothing.
        storage_options: Options of the fsspec filesystem (``endpoint_url``, ``key``, ``secret``...)
            for ``src`` and ``dst`` that are URLs (local ones are skipped), kept for every URL under
            each one's parent (never above the bucket), as ``tp.set_storage_options`` keeps them.

    Returns:
        A :class:`Conversion` with the mapping table, what was skipped and the files written.

    Raises:
        InvalidArgumentError: Bad options, a name conflict (naming both sources), a
            ``transpose`` of a tensor that is not 2-D, a name that cannot become an object path
            or a safetensors name (``__metadata__``, one that is not valid UTF-8), a header
            too large for a shard, or tensors the destination cannot hold (without
            ``skip_unsupported``), or ``storage_options`` that are not a mapping with ``str``
            keys or are given with two local paths.
        NotFoundError: ``src`` does not exist.
        DataLossError: ``src`` is damaged.
        WriteError: The destination cannot be written (a parent is a file, no permission, no
            space); nothing is left of it, not even the directories made for it.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> import trackpoint as tp
        >>> model = tp.Module(); model.dense = tp.Module(); model.dense.kernel = tp.Variable(np.ones((2, 3), np.float32))
        >>> directory = tempfile.mkdtemp()
        >>> path = tp.Checkpoint(model=model).save(directory + "/ckpt")
        >>> result = tp.convert(path, directory + "/hf", rename=[r"^model\\.="])
        >>> [(row.source, row.name) for row in result.mapping], os.listdir(directory + "/hf")
        ([('model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE', 'dense.kernel')], ['model.safetensors'])
        >>> back = tp.convert(directory + "/hf", directory + "/back/ckpt")
        >>> tp.load_variable(directory + "/back/ckpt", "dense/kernel/.ATTRIBUTES/VARIABLE_VALUE").shape
        (2, 3)
    """
    use_storage_options_for_urls([src, dst], storage_options)
    rules = NameRules.make(rename=rename, only=only, drop=drop, transpose=transpose)
    if _hf_layout.is_safetensors_path(os.fspath(src)):
        tf_only = {
            "keys": keys is not None,
            "include_slots": include_slots,
            "include_save_counter": include_save_counter,
            "include_graph": include_graph,
            "max_shard_size": _hf_layout.parse_size(max_shard_size) != _hf_layout.DEFAULT_SHARD_SIZE,
        }
        given = [name for name, set_ in tf_only.items() if set_]
        if given:
            raise InvalidArgumentError(
                f"{src}: {', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to a TF checkpoint source; "
                "this source is safetensors weights, which convert to a TF checkpoint: leave "
                f"{'it' if len(given) == 1 else 'them'} out",
                path=os.fspath(src),
            )
        rows, files = _to_tf.convert_to_tf(
            os.fspath(src), os.fspath(dst), rules, skip_unsupported, save_counter, dry_run
        )
        return Conversion("safetensors->tf", rows, (), files)
    if not save_counter:
        raise InvalidArgumentError(
            f"{src}: save_counter=False applies to safetensors weights converted to TF; this source is a TF "
            "checkpoint (include_save_counter=True converts its own save_counter)",
            path=os.fspath(src),
        )
    shard_bytes = _hf_layout.parse_size(max_shard_size)
    check_destination(os.fspath(dst))
    if include_graph:
        _check_whole(os.fspath(src), rules, keys)
        keys, include_slots, include_save_counter = "tf", True, True
    with CheckpointReader(source_prefix(os.fspath(src))) as reader:
        mapping, skipped = _plan_from_tf(
            reader, rules, keys or "path", include_slots, include_save_counter, skip_unsupported, include_graph
        )
        if dry_run:
            return Conversion("tf->safetensors", mapping, skipped)
        metadata = {"format": "pt"}
        if include_graph:
            metadata |= _whole_checkpoint_metadata(reader, [key for key, _ in skipped])
            skipped = ()
        with BundleReader(reader.prefix) as bundle:
            files = write_safetensors(reader, bundle, mapping, os.fspath(dst), shard_bytes, metadata)
    return Conversion("tf->safetensors", mapping, skipped, files)


def _check_whole(src: str, rules: NameRules, keys: str | None) -> None:
    """Refuse what would keep ``include_graph`` from converting back exactly."""
    if rules != NameRules() or keys == "path":
        raise InvalidArgumentError(
            f"{src}: include_graph keeps the whole checkpoint under its TF keys, to convert back to the same "
            "graph; it takes no rename/only/drop/transpose rules and no keys='path' (rewrite the TF checkpoint "
            "with tp.rewrite first, or convert without include_graph)",
            path=src,
        )


def _whole_checkpoint_metadata(reader: CheckpointReader, string_keys: list[str]) -> dict[str, str]:
    """The object graph and the string tensors of ``reader``, as :mod:`._embedded_graph` metadata."""
    if not reader.has_tensor(OBJECT_GRAPH_KEY):
        raise InvalidArgumentError(
            f"{reader.prefix}: a name-based checkpoint has no object graph to include; convert it without "
            'include_graph (its keys="tf" names convert back to the same keys)',
            path=reader.prefix,
        )
    graph = reader.get_tensor(OBJECT_GRAPH_KEY)
    if not isinstance(graph, bytes):
        raise InvalidArgumentError(f"{reader.prefix}: {OBJECT_GRAPH_KEY} is not a scalar string", path=reader.prefix)
    metadata = _embedded_graph.encode(graph, {key: reader.get_tensor(key) for key in string_keys})
    size = sum(len(value) for value in metadata.values())
    if size > MAX_HEADER_BYTES // 2:
        raise InvalidArgumentError(
            f"{reader.prefix}: its object graph and string tensors take {size} bytes of metadata, more than a "
            f"safetensors header holds ({MAX_HEADER_BYTES // 2} here); convert without include_graph",
            path=reader.prefix,
        )
    return metadata


def _plan_from_tf(
    reader: CheckpointReader,
    rules: NameRules,
    keys: str,
    include_slots: bool,
    include_save_counter: bool,
    skip_unsupported: bool,
    include_graph: bool = False,
) -> tuple[tuple[MappingRow, ...], tuple[tuple[str, str], ...]]:
    """The mapping rows and the tensors left out (with ``include_graph``: the string tensors, which
    go into the metadata instead)."""
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    rows: list[MappingRow] = []
    unsupported: list[tuple[str, str]] = []
    carried: list[tuple[str, str]] = []
    for key, default in default_names(reader, keys, include_slots, include_save_counter):
        shape = tuple(shapes[key])
        applied = rules.apply(default, shape, reader.prefix)
        if applied is None:
            continue
        name, transposed = applied
        if name == METADATA_KEY:  # the header's own entry: the file would be corrupt
            raise InvalidArgumentError(
                f"{reader.prefix}: {key!r} would be named {name!r}, the safetensors header's metadata entry, "
                f"which no tensor may be named; rename it (e.g. rename={{'^{name}$': 'metadata'}}) or drop it",
                path=reader.prefix,
                key=key,
            )
        dtype = dtypes[key]
        if not _is_utf8(name):  # a key of undecodable bytes, read with surrogateescape
            unsupported.append((key, f"name {name!r} is not valid UTF-8, which safetensors names must be"))
            continue
        if safetensors_dtype(dtype) is None:
            what = "string" if dtype == np.dtype(object) else str(dtype)
            if include_graph and what == "string":
                carried.append((key, "string tensor: carried in the metadata"))
                continue
            unsupported.append((key, f"{what} tensors cannot be stored in safetensors"))
            continue
        rows.append(MappingRow(key, name, dtype, shape[::-1] if transposed else shape, transposed))
    if unsupported and include_graph:
        raise InvalidArgumentError(
            f"{reader.prefix}: include_graph needs every tensor, and {unsupported[0][0]!r} cannot be stored in "
            "safetensors; convert without include_graph and with skip_unsupported=True",
            path=reader.prefix,
            key=unsupported[0][0],
        )
    if unsupported and not skip_unsupported:
        listed = ", ".join(f"{key!r} ({_short(reason)})" for key, reason in unsupported[:8])
        more = f" and {len(unsupported) - 8} more" if len(unsupported) > 8 else ""
        raise InvalidArgumentError(
            f"{reader.prefix}: {len(unsupported)} tensor(s) cannot be stored in safetensors: {listed}{more}. Pass "
            "skip_unsupported=True (--skip-unsupported) to leave them out, --drop them, or --rename them",
            path=reader.prefix,
            key=unsupported[0][0],
        )
    rows.sort(key=lambda row: row.name)
    check_conflicts(rows, reader.prefix)
    return tuple(rows), tuple(carried or unsupported)


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(reason: str) -> str:
    """A reason as the list of refused tensors gives it: the dtype, or that the name is not UTF-8."""
    return "name not UTF-8" if reason.startswith("name ") else reason.split(" ")[0]
