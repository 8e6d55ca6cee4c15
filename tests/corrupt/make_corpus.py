"""Write the corpus of damaged and hostile checkpoints in tests/corrupt/corpus/ (run from the repo root).

    python tests/corrupt/make_corpus.py

Each case is a directory holding a checkpoint (prefix ``ckpt``) and maybe a ``checkpoint``
state file; ``manifest.json`` names, for each case, the operation to run and the exact
``trackpoint.errors`` class it must raise ("none" where the file is legal but odd).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np

import trackpoint as tp
from trackpoint._format import slices, sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format._proto import trackable_object_graph_pb2 as gpb
from trackpoint._format.bundle_writer import encode_entry
from trackpoint._format.crc import crc32c, mask
from trackpoint._format.index_write import header_bytes
from trackpoint._format.sstable_read import read_table_spans
from trackpoint._storage import naming

HERE = pathlib.Path(__file__).resolve().parent / "corpus"
CASES: dict[str, dict[str, str]] = {}


def case(name: str, operation: str, expected: str, why: str) -> str:
    directory = HERE / name
    directory.mkdir(parents=True)
    CASES[name] = {"operation": operation, "expected": expected, "why": why}
    return str(directory / "ckpt")


def good(prefix: str) -> None:
    model = tp.Module()
    model.w = tp.Variable(np.arange(12, dtype=np.float32).reshape(3, 4))
    model.names = tp.Variable(np.array([b"alpha", b"beta"], dtype=object))
    tp.Checkpoint(model=model).write(prefix)


def rewrite_index(prefix: str, entries: dict[bytes, bytes], header: bytes | None = None) -> None:
    items = [(b"", header if header is not None else header_bytes(1))] + sorted(entries.items())
    pathlib.Path(naming.index_filename(prefix)).write_bytes(sstable.build_table(items))


def write_data(prefix: str, data: bytes, shard: int = 0, shards: int = 1) -> None:
    pathlib.Path(naming.data_filename(prefix, shard, shards)).write_bytes(data)


def flip(path: str, offset: int) -> None:
    raw = bytearray(pathlib.Path(path).read_bytes())
    raw[offset] ^= 0x20
    pathlib.Path(path).write_bytes(bytes(raw))


def with_graph(prefix: str, graph: bytes, extra: dict[str, np.ndarray] | None = None) -> None:
    tensors = dict(extra or {})
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = graph
    tp.save_tensors(prefix, tensors)


def main() -> None:
    shutil.rmtree(HERE, ignore_errors=True)

    p = case("bad_magic", "read_all", "DataLossError", "the footer's magic number is wrong")
    good(p)
    index = naming.index_filename(p)
    flip(index, os.path.getsize(index) - 1)

    p = case("truncated_index", "read_all", "DataLossError", "the index file is cut short")
    good(p)
    pathlib.Path(naming.index_filename(p)).write_bytes(pathlib.Path(naming.index_filename(p)).read_bytes()[:30])

    p = case("truncated_data", "read_all", "DataLossError", "the data file is cut short")
    good(p)
    data = naming.data_filename(p, 0, 1)
    os.truncate(data, 20)

    p = case("flipped_data_byte", "read_all", "DataLossError", "one bit of a tensor changed")
    good(p)
    flip(naming.data_filename(p, 0, 1), 5)

    p = case("flipped_index_byte", "read_all", "DataLossError", "one bit of an index block changed")
    good(p)
    flip(naming.index_filename(p), 12)

    p = case("size_disagrees_with_shape", "read_all", "DataLossError", "shape*dtype larger than the entry's size")
    write_data(p, b"\0" * 8)
    rewrite_index(p, {b"w": encode_entry(1, [1000], 0, 0, 8, mask(crc32c(b"\0" * 8)))})

    p = case("offset_past_end", "read_all", "DataLossError", "an entry points past the end of its shard")
    write_data(p, b"\0" * 8)
    rewrite_index(p, {b"w": encode_entry(1, [2], 0, 1 << 40, 8, 0)})

    p = case(
        "huge_string_shape",
        "read_all",
        "DataLossError",
        "a tiny index declaring a string tensor of 2**62 elements (crashes TF 2.21's reader)",
    )
    write_data(p, b"\0" * 4)
    rewrite_index(p, {b"s": encode_entry(7, [1 << 62], 0, 0, 4, 0)})

    p = case("huge_numeric_shape", "read_all", "DataLossError", "a 4 TiB tensor whose size agrees with its shape")
    write_data(p, b"\0" * 16)
    rewrite_index(p, {b"w": encode_entry(1, [1 << 40], 0, 0, 1 << 42, 0)})

    p = case("negative_dimension", "read_all", "DataLossError", "a dimension of -5")
    write_data(p, b"")
    entry = pb.BundleEntryProto(dtype=1)
    entry.shape.dim.add().size = -5
    rewrite_index(p, {b"w": entry.SerializeToString()})

    p = case("shard_beyond_count", "read_all", "DataLossError", "an entry names shard 7 of 1")
    write_data(p, b"\0" * 8)
    rewrite_index(p, {b"w": encode_entry(1, [2], 7, 0, 8, 0)})

    p = case("huge_shard_count", "read_all", "DataLossError", "the header declares 2**30 shards")
    write_data(p, b"\0" * 8)
    rewrite_index(p, {b"w": encode_entry(1, [2], 0, 0, 8, 0)}, header_bytes(1 << 30))

    p = case("missing_shard", "read_all", "NotFoundError", "a data file of a sharded checkpoint is missing")
    model = tp.Module()
    model.w = tp.Variable(np.arange(64, dtype=np.float32))
    tp.Checkpoint(model=model).write(
        p, tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(64))
    )
    shards = sorted(f for f in os.listdir(os.path.dirname(p)) if ".data-" in f)
    os.unlink(os.path.join(os.path.dirname(p), shards[1]))

    for name, boxes, why in [
        ("overlapping_slices", [((0, 2), (0, 4)), ((1, 3), (0, 4))], "two slices cover the same row"),
        ("incomplete_slices", [((0, 2), (0, 4))], "half of the tensor has no slice"),
        ("slice_out_of_range", [((0, 2), (0, 4)), ((2, 3), (0, 4))], "a slice runs past the tensor"),
    ]:
        p = case(name, "read_all", "DataLossError", why)
        full = pb.BundleEntryProto(dtype=1)
        full.shape.dim.add().size = 4
        full.shape.dim.add().size = 4
        data = b""
        entries = {}
        for extents in boxes:
            full.slices.append(slices.extents_to_proto(extents))
            part = np.zeros([length for _, length in extents], np.float32).tobytes()
            entries[slices.encode_slice_key("t", extents)] = encode_entry(
                1, [length for _, length in extents], 0, len(data), len(part), mask(crc32c(part))
            )
            data += part
        entries[b"t"] = full.SerializeToString()
        write_data(p, data)
        rewrite_index(p, entries)

    p = case("malformed_entry", "read_all", "DataLossError", "an entry is not a BundleEntryProto")
    write_data(p, b"")
    rewrite_index(p, {b"w": b"\xff\xff\xff\xff"})

    p = case("unknown_dtype", "read_all", "InvalidArgumentError", "a DT_VARIANT tensor")
    write_data(p, b"\0" * 4)
    rewrite_index(p, {b"v": encode_entry(21, [1], 0, 0, 4, mask(crc32c(b"\0" * 4)))})

    p = case("newer_format", "read_all", "InvalidArgumentError", "the header asks for a newer reader")
    good(p)
    header = pb.BundleHeaderProto(num_shards=1)
    header.version.producer = 5
    header.version.min_consumer = 3
    table = read_table_spans(pathlib.Path(naming.index_filename(p)).read_bytes(), "x")
    items = [(key, table.data[a:b]) for key, a, b in zip(table.keys, table.starts, table.ends)]
    pathlib.Path(naming.index_filename(p)).write_bytes(
        sstable.build_table([(b"", header.SerializeToString())] + items[1:])
    )

    p = case("string_lengths_overflow", "read_all", "DataLossError", "a string claims more bytes than stored")
    tp.save_tensors(p, {"s": np.array([b"abc"], dtype=object)})
    raw = bytearray(pathlib.Path(naming.data_filename(p, 0, 1)).read_bytes())
    raw[0] = 0x7F
    pathlib.Path(naming.data_filename(p, 0, 1)).write_bytes(bytes(raw))

    p = case("garbage_object_graph", "restore", "DataLossError", "the object graph is not a protobuf")
    with_graph(p, b"\xff\xff\xff\xff garbage")

    graph = gpb.TrackableObjectGraph()
    graph.nodes.add().children.add(node_id=99, local_name="x")
    p = case("graph_child_out_of_range", "restore", "DataLossError", "a child names node 99 of 1")
    with_graph(p, graph.SerializeToString())

    graph = gpb.TrackableObjectGraph()
    root = graph.nodes.add()
    root.children.add(node_id=1, local_name="a")
    a = graph.nodes.add()
    a.children.add(node_id=0, local_name="back")
    a.children.add(node_id=1, local_name="self")
    a.attributes.add(name="VARIABLE_VALUE", checkpoint_key="a/.ATTRIBUTES/VARIABLE_VALUE")
    p = case("graph_cycle", "view", "none", "cycles are legal: they must not hang")
    with_graph(p, graph.SerializeToString(), {"a/.ATTRIBUTES/VARIABLE_VALUE": np.float32(1)})

    graph = gpb.TrackableObjectGraph()
    depth = 50_000
    for i in range(depth):
        graph.nodes.add().children.add(node_id=i + 1, local_name="n")
    graph.nodes.add()
    p = case("graph_deep_chain", "view", "none", "a 50,000-deep chain must not recurse or blow up")
    with_graph(p, graph.SerializeToString())

    p = case("slot_reference_out_of_range", "restore", "DataLossError", "a slot names variable node 7 of 1")
    graph = gpb.TrackableObjectGraph()
    graph.nodes.add().slot_variables.add(original_variable_node_id=7, slot_name="m", slot_variable_node_id=8)
    with_graph(p, graph.SerializeToString())

    p = case("graph_not_a_string", "restore", "InvalidArgumentError", "the graph key holds floats")
    tp.save_tensors(p, {"_CHECKPOINTABLE_OBJECT_GRAPH": np.zeros(3, np.float32)})

    directory = HERE / "state_garbage"
    directory.mkdir()
    (directory / "checkpoint").write_bytes(b"model_checkpoint_path: {{{ \xff")
    CASES["state_garbage"] = {
        "operation": "latest",
        "expected": "InvalidArgumentError",
        "why": "the state file is not text protobuf",
    }

    directory = HERE / "state_names_missing"
    directory.mkdir()
    (directory / "checkpoint").write_text('model_checkpoint_path: "ckpt-9"\n')
    CASES["state_names_missing"] = {
        "operation": "load_dir",
        "expected": "NotFoundError",
        "why": "the state file names a checkpoint that is not there",
    }

    (HERE / "manifest.json").write_text(json.dumps(CASES, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
