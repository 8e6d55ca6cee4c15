"""The one door from the edges to checkpoint files: bundle I/O for tools, adapters and the CLI.

``tools/``, ``torch/``, ``distributed/``, ``cli/`` (and any adapter to come) reach the format
layer (``_format``: bytes to records), the storage layer (``_storage``: where bytes live) and
a checkpoint's object-graph proto only through this module; the save pipeline's pieces for
adapters that take part in a save come through :mod:`trackpoint._pipeline`, the only other
facade. ``tests/test_layers.py`` pins that rule. So a core module can move, split or be
renamed without touching an edge: only the imports below change.

This module is internal (its name has a leading underscore): nothing here is public API, and
a name is here because an edge uses it, not for completeness. It defines nothing of its own.

Examples:
    >>> from trackpoint import _io
    >>> _io.OBJECT_GRAPH_KEY
    '_CHECKPOINTABLE_OBJECT_GRAPH'
    >>> _io.printable("a\\nb")
    'a\\\\nb'
"""

from __future__ import annotations

from trackpoint._format import bounded_json, slices
from trackpoint._format._proto import tensor_bundle_pb2, trackable_object_graph_pb2
from trackpoint._format.bundle_reader import BundleReader, Entry
from trackpoint._format.bundle_writer import BundleWriter, ShardWriter, dtype_of
from trackpoint._format.chunked_read import StoredStream, stored_chunks, verify_parts
from trackpoint._format.dtypes import DTYPES, FLOAT_NAMES, INT_NAMES, DType, enum_name, family, from_numpy
from trackpoint._format.entries import slice_keys
from trackpoint._format.entry_rules import MAX_RANK
from trackpoint._format.index_entries import IndexEntries
from trackpoint._format.index_write import merge_shards, write_index
from trackpoint._format.keys import encode_key
from trackpoint._format.pread import read_bytes, read_into
from trackpoint._format.read_tuning import DEFAULT_TUNING
from trackpoint._format.sliced_read import check_disjoint
from trackpoint._format.slices import readable_key
from trackpoint._format.state_file import is_directory, resolve_prefix
from trackpoint._format.tensors import numeric_bytes_view
from trackpoint._format.text import printable
from trackpoint._format.threads import parallel_map
from trackpoint._graph.gc_pause import gc_paused
from trackpoint._graph.keys import (
    OBJECT_ATTRIBUTES,
    OBJECT_GRAPH_KEY,
    OPTIMIZER_SLOTS,
    checkpoint_key,
    escape_local_name,
    slot_variable_key,
    unescape_local_name,
)
from trackpoint._graph.object_graph import first_parents, parse_graph, read_object_graph, unescape
from trackpoint._storage.atomic import fsync_directory, remove_quietly, write_file
from trackpoint._storage.files import exists, list_names, listing, open_regular, read_regular
from trackpoint._storage.fsspec_io import filesystem
from trackpoint._storage.naming import data_filename, file_prefix
from trackpoint._storage.object_storage import publish_objects
from trackpoint._storage.readahead import start_readahead
from trackpoint._storage.storage import storage_for
from trackpoint._storage.storage_options import urls_among, use_storage_options, use_storage_options_for_urls
from trackpoint._storage.writeback import WRITEBACK_BYTES, start_writeback

__all__ = [
    "DEFAULT_TUNING",
    "DTYPES",
    "FLOAT_NAMES",
    "INT_NAMES",
    "MAX_RANK",
    "OBJECT_ATTRIBUTES",
    "OBJECT_GRAPH_KEY",
    "OPTIMIZER_SLOTS",
    "WRITEBACK_BYTES",
    "BundleReader",
    "BundleWriter",
    "DType",
    "Entry",
    "IndexEntries",
    "ShardWriter",
    "StoredStream",
    "bounded_json",
    "check_disjoint",
    "checkpoint_key",
    "data_filename",
    "dtype_of",
    "encode_key",
    "enum_name",
    "escape_local_name",
    "exists",
    "family",
    "file_prefix",
    "filesystem",
    "first_parents",
    "from_numpy",
    "fsync_directory",
    "gc_paused",
    "is_directory",
    "list_names",
    "listing",
    "merge_shards",
    "numeric_bytes_view",
    "open_regular",
    "parallel_map",
    "parse_graph",
    "printable",
    "publish_objects",
    "read_bytes",
    "read_into",
    "read_object_graph",
    "read_regular",
    "readable_key",
    "remove_quietly",
    "resolve_prefix",
    "slice_keys",
    "slices",
    "slot_variable_key",
    "start_readahead",
    "start_writeback",
    "storage_for",
    "stored_chunks",
    "tensor_bundle_pb2",
    "trackable_object_graph_pb2",
    "unescape",
    "unescape_local_name",
    "urls_among",
    "use_storage_options",
    "use_storage_options_for_urls",
    "verify_parts",
    "write_file",
    "write_index",
]
